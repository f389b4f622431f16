/*
 * sctp-ddp-peer: a DDP-over-SCTP echo peer on Linux kernel SCTP, for the
 * interop suite (tests/interop/run, scenarios sctp-echo-*).
 *
 *   sctp-ddp-peer [-t SECS] listen PORT          accept one association on PORT
 *   sctp-ddp-peer [-t SECS] connect ADDR PORT    open one to ADDR:PORT
 *
 * Heads up! Read RFC 5043 (DDP over SCTP: §5 the PPIDs and message layouts,
 * §5.1 the adaptation code point, §6 session control, §8 unordered
 * delivery), RFC 6581 §7 (enhanced session control: function codes 5/6/7,
 * the IRD/ORD word of §9.1), RFC 5061 §4.2.6 (the Adaptation Layer
 * Indication), RFC 6951 (SCTP over UDP, port 9899) and RFC 6458 (the
 * sockets API: SCTP_ADAPTATION_LAYER, SCTP_EVENT, SCTP_RCVINFO and
 * SCTP_SNDINFO; SCTP_REMOTE_UDP_ENCAPS_PORT is Linux's, see linux/sctp.h).
 *
 * What it does, on a one-to-one style socket (SOCK_STREAM, IPPROTO_SCTP):
 *  - UDP encapsulation (RFC 6951): the kernel listens on UDP 9899
 *    (net.sctp.udp_port, set here if it is 0) and sends to UDP port 9899
 *    (SCTP_REMOTE_UDP_ENCAPS_PORT on the socket, and net.sctp.encap_port).
 *  - Its INIT or INIT ACK carries the Adaptation Layer Indication with DDP's
 *    code point 1 (RFC 5043 §5.1); it prints the peer's ("none" if the peer
 *    sent none).
 *  - PPID 17 (DDP Stream Session Control: DDP-SSN(16) | Function(16) |
 *    private data, RFC 5043 §5.3): an Enhanced Initiate (5) is answered with
 *    an Enhanced Accept (6) carrying the same IRD/ORD word (RFC 6581 §7, the
 *    first 4 octets of the private data); a Terminate (4) ends the run. In
 *    connect mode it sends an Enhanced Initiate first and expects an
 *    Enhanced Accept.
 *  - PPID 16 (DDP Segment): echoed octet for octet, unordered (RFC 5043 §8),
 *    on the stream it came on, with the same PPID. In connect mode a segment
 *    delivered before the Enhanced Accept (unordered messages can overtake
 *    it) is held and echoed once the Accept is in.
 *  - A Terminate or the end of the association: a summary line, exit 0.
 *    Anything unexpected: a line saying what, exit 1. No end within the
 *    timeout (-t, 60 s by default): exit 2.
 *
 * PPIDs pass through the sockets API unswapped (an opaque 32-bit value
 * in network byte order), so PPID 16 is htonl(16). The adaptation code point is in host
 * order (Linux converts it).
 *
 * Built on the host: gcc -static -O2 -Wall -o sctp-ddp-peer sctp-ddp-peer.c
 * (linux-libc-dev's <linux/sctp.h>; no libsctp).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sctp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IPPROTO_SCTP
#define IPPROTO_SCTP 132
#endif

/* RFC 6951 §5.1 (IANA): the UDP port of SCTP over UDP. */
#define UDP_ENCAPSULATION_PORT 9899
/* RFC 5043 §5.1: DDP's adaptation code point. */
#define ADAPTATION_CODE_POINT_DDP 1u
/* RFC 5043 §5 (IANA SCTP PPID registry). */
#define PPID_DDP_SEGMENT 16u
#define PPID_SESSION_CONTROL 17u
/* RFC 5043 §5.3, RFC 6581 §7 (RFC 6580 §3.5 registry). */
#define FN_TERMINATE 4
#define FN_ENHANCED_INITIATE 5
#define FN_ENHANCED_ACCEPT 6
/* RFC 6581 §9.1 word: IRD and ORD are the low 14 bits of each half. */
#define IRD_ORD_MASK 0x3fff
/* The IRD and ORD this side offers as an initiator. */
#define OFFER_IRD 16
#define OFFER_ORD 16
/* RFC 5043 §9: a session control message is at most 516 octets; a DDP
 * segment message fits one packet. Anything up to 64 KiB is read whole. */
#define MESSAGE_MAX 65536

static const char *prog = "sctp-ddp-peer";
static struct timespec deadline;
static unsigned long long echoed_messages, echoed_octets;
static int adaptation_seen;
static uint32_t adaptation_value;
static int adaptation_said;
static int session_up;
static uint16_t control_ssn_tx;

/* DDP segments that arrived before the Enhanced Accept. Every message is
 * unordered (RFC 5043 §8), so a segment the responder sent after its Accept
 * can be delivered first; it is held and echoed once the Accept is in. */
#define EARLY_MAX 256
static struct early {
	uint16_t sid;
	uint32_t ppid;
	size_t len;
	uint8_t *data;
} early[EARLY_MAX];
static int early_count;

static void die(const char *what)
{
	printf("%s: error: %s: %s\n", prog, what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void fail(const char *what)
{
	printf("%s: error: %s\n", prog, what);
	fflush(stdout);
	exit(1);
}

/* Milliseconds left before the deadline (0 when past). */
static int ms_left(void)
{
	struct timespec now;
	long long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (deadline.tv_sec - now.tv_sec) * 1000LL + (deadline.tv_nsec - now.tv_nsec) / 1000000;
	return ms > 0 ? (int)(ms > 1000000 ? 1000000 : ms) : 0;
}

/* Waits until fd has `events` or the deadline passes (exit 2). */
static void wait_for(int fd, short events, const char *what)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;

	for (;;) {
		n = poll(&p, 1, ms_left());
		if (n > 0)
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("poll");
		printf("%s: timeout while %s (echoed %llu messages, %llu octets)\n", prog, what,
		       echoed_messages, echoed_octets);
		fflush(stdout);
		exit(2);
	}
}

/* Sets a /proc/sys value if it differs; failures are reported, not fatal
 * (the socket option below may be enough). */
static void sysctl_set(const char *path, const char *value)
{
	char now[32] = { 0 };
	int fd = open(path, O_RDWR);

	if (fd < 0) {
		printf("%s: note: %s: %s\n", prog, path, strerror(errno));
		return;
	}
	if (read(fd, now, sizeof(now) - 1) > 0 && atoi(now) == atoi(value)) {
		close(fd);
		return;
	}
	if (pwrite(fd, value, strlen(value), 0) < 0)
		printf("%s: note: writing %s: %s\n", prog, path, strerror(errno));
	close(fd);
}

static void subscribe(int fd, uint16_t type)
{
	struct sctp_event ev = { .se_assoc_id = SCTP_FUTURE_ASSOC, .se_type = type, .se_on = 1 };

	if (setsockopt(fd, IPPROTO_SCTP, SCTP_EVENT, &ev, sizeof(ev)) < 0)
		die("setsockopt SCTP_EVENT");
}

/* A one-to-one socket with DDP's adaptation code point, UDP encapsulation
 * towards UDP port 9899, the notifications we read, and SCTP_RCVINFO. */
static int ddp_socket(void)
{
	struct sctp_setadaptation adaptation = { .ssb_adaptation_ind = ADAPTATION_CODE_POINT_DDP };
	struct sctp_udpencaps encaps;
	struct sockaddr_in *any;
	int fd, on = 1;

	fd = socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP);
	if (fd < 0)
		die("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) (is sctp.ko loaded?)");
	/* RFC 5043 §5.1: DDP's code point, 1, in the Adaptation Layer
	 * Indication of our INIT and INIT ACK (RFC 5061 §4.2.6). */
	if (setsockopt(fd, IPPROTO_SCTP, SCTP_ADAPTATION_LAYER, &adaptation, sizeof(adaptation)) < 0)
		die("setsockopt SCTP_ADAPTATION_LAYER");
	/* RFC 6951: the remote UDP port, for every future association of
	 * the socket (an unspecified address, SCTP_FUTURE_ASSOC); the port is
	 * in network byte order. */
	memset(&encaps, 0, sizeof(encaps));
	encaps.sue_assoc_id = SCTP_FUTURE_ASSOC;
	any = (struct sockaddr_in *)&encaps.sue_address;
	any->sin_family = AF_INET;
	any->sin_addr.s_addr = htonl(INADDR_ANY);
	encaps.sue_port = htons(UDP_ENCAPSULATION_PORT);
	if (setsockopt(fd, IPPROTO_SCTP, SCTP_REMOTE_UDP_ENCAPS_PORT, &encaps, sizeof(encaps)) < 0)
		die("setsockopt SCTP_REMOTE_UDP_ENCAPS_PORT");
	subscribe(fd, SCTP_ASSOC_CHANGE);
	subscribe(fd, SCTP_SHUTDOWN_EVENT);
	subscribe(fd, SCTP_ADAPTATION_INDICATION);
	if (setsockopt(fd, IPPROTO_SCTP, SCTP_RECVRCVINFO, &on, sizeof(on)) < 0)
		die("setsockopt SCTP_RECVRCVINFO");
	/* One message, one packet, now: no bundling delay. */
	if (setsockopt(fd, IPPROTO_SCTP, SCTP_NODELAY, &on, sizeof(on)) < 0)
		die("setsockopt SCTP_NODELAY");
	return fd;
}

static void say_adaptation(void)
{
	if (adaptation_said)
		return;
	adaptation_said = 1;
	if (adaptation_seen)
		printf("%s: peer adaptation indication: %u%s\n", prog, adaptation_value,
		       adaptation_value == ADAPTATION_CODE_POINT_DDP ? " (DDP)" : "");
	else
		printf("%s: peer adaptation indication: none\n", prog);
	fflush(stdout);
}

static void summary(const char *end)
{
	say_adaptation();
	printf("%s: summary: echoed %llu messages, %llu octets; ended by %s\n", prog,
	       echoed_messages, echoed_octets, end);
	fflush(stdout);
}

/* Sends one message, unordered (RFC 5043 §8: DDP segments and session
 * control messages alike go unordered). `ppid` is as it
 * came from SCTP_RCVINFO, or htonl() of the registry value. */
static void send_message(int fd, uint16_t sid, uint32_t ppid, const void *data, size_t len)
{
	char control[CMSG_SPACE(sizeof(struct sctp_sndinfo))];
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = control,
		.msg_controllen = sizeof(control),
	};
	struct cmsghdr *cmsg;
	struct sctp_sndinfo info = { .snd_sid = sid, .snd_flags = SCTP_UNORDERED, .snd_ppid = ppid };
	ssize_t n;

	memset(control, 0, sizeof(control));
	cmsg = CMSG_FIRSTHDR(&msg);
	cmsg->cmsg_level = IPPROTO_SCTP;
	cmsg->cmsg_type = SCTP_SNDINFO;
	cmsg->cmsg_len = CMSG_LEN(sizeof(info));
	memcpy(CMSG_DATA(cmsg), &info, sizeof(info));
	for (;;) {
		wait_for(fd, POLLOUT, "sending");
		n = sendmsg(fd, &msg, MSG_DONTWAIT);
		if (n == (ssize_t)len)
			return;
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			die("sendmsg");
		fail("sendmsg sent part of a message");
	}
}

/* A session control message: DDP-SSN | Function Code | private data
 * (RFC 5043 §5.3). Control messages are counted from 0 in each direction. */
static void send_control(int fd, uint16_t sid, uint16_t function, const uint8_t *pd, size_t pd_len)
{
	uint8_t message[4 + 512];

	if (pd_len > 512)
		fail("private data over 512 octets");
	message[0] = control_ssn_tx >> 8;
	message[1] = control_ssn_tx & 0xff;
	message[2] = function >> 8;
	message[3] = function & 0xff;
	memcpy(message + 4, pd, pd_len);
	control_ssn_tx++;
	send_message(fd, sid, htonl(PPID_SESSION_CONTROL), message, 4 + pd_len);
}

static void print_word(const char *what, const uint8_t *word)
{
	unsigned ird_half = (unsigned)word[0] << 8 | word[1];
	unsigned ord_half = (unsigned)word[2] << 8 | word[3];

	/* RFC 6581 §9.1 word: A=0x8000 B=0x4000 IRD | C=0x8000 D=0x4000 ORD. */
	printf("%s: %s: IRD=%u ORD=%u A=%u B=%u C=%u D=%u\n", prog, what, ird_half & IRD_ORD_MASK,
	       ord_half & IRD_ORD_MASK, !!(ird_half & 0x8000), !!(ird_half & 0x4000),
	       !!(ord_half & 0x8000), !!(ord_half & 0x4000));
	fflush(stdout);
}

/* Returns 1 when the run is over (a Terminate). */
static int on_control(int fd, uint16_t sid, const uint8_t *m, size_t len, int initiator)
{
	uint16_t function;

	if (len < 4)
		fail("a session control message shorter than DDP-SSN and Function Code");
	function = (uint16_t)(m[2] << 8 | m[3]);
	switch (function) {
	case FN_TERMINATE:
		printf("%s: got Terminate (4) on stream %u\n", prog, sid);
		return 1;
	case FN_ENHANCED_INITIATE:
		if (initiator || session_up)
			fail("an Enhanced Initiate where none belongs");
		if (len < 8)
			fail("an Enhanced Initiate without its IRD/ORD word (RFC 6581 §7)");
		print_word("got Enhanced Initiate (5)", m + 4);
		/* The same IRD/ORD word back, no ULP private data. */
		send_control(fd, sid, FN_ENHANCED_ACCEPT, m + 4, 4);
		print_word("sent Enhanced Accept (6)", m + 4);
		session_up = 1;
		return 0;
	case FN_ENHANCED_ACCEPT:
		if (!initiator || session_up)
			fail("an Enhanced Accept where none belongs");
		if (len < 8)
			fail("an Enhanced Accept without its IRD/ORD word (RFC 6581 §7)");
		print_word("got Enhanced Accept (6)", m + 4);
		/* RFC 6581 §9.1: the responder's ORD at most our IRD. */
		if (((m[6] << 8 | m[7]) & IRD_ORD_MASK) > OFFER_IRD)
			fail("the responder's ORD exceeds our IRD (RFC 6581 §9.1)");
		session_up = 1;
		return 0;
	default:
		printf("%s: error: unexpected session control function %u\n", prog, function);
		fflush(stdout);
		exit(1);
	}
}

/* Reads a notification; returns 1 when the association is over. */
static int on_notification(const uint8_t *m, size_t len)
{
	const union sctp_notification *n = (const void *)m;

	if (len < sizeof(n->sn_header))
		return 0;
	switch (n->sn_header.sn_type) {
	case SCTP_ADAPTATION_INDICATION:
		if (len >= sizeof(n->sn_adaptation_event)) {
			adaptation_seen = 1;
			adaptation_value = n->sn_adaptation_event.sai_adaptation_ind;
		}
		return 0;
	case SCTP_ASSOC_CHANGE:
		if (len < sizeof(n->sn_assoc_change))
			return 0;
		switch (n->sn_assoc_change.sac_state) {
		case SCTP_COMM_UP:
			printf("%s: association up (%u out / %u in streams)\n", prog,
			       n->sn_assoc_change.sac_outbound_streams,
			       n->sn_assoc_change.sac_inbound_streams);
			fflush(stdout);
			return 0;
		case SCTP_COMM_LOST:
			printf("%s: association lost (ABORT or timeout)\n", prog);
			return 1;
		case SCTP_SHUTDOWN_COMP:
			printf("%s: association shut down\n", prog);
			return 1;
		default:
			return 0;
		}
	case SCTP_SHUTDOWN_EVENT:
		printf("%s: the peer shut the association down\n", prog);
		return 1;
	default:
		return 0;
	}
}

/* Octet for octet, same stream, same PPID, unordered. */
static void echo(int fd, uint16_t sid, uint32_t ppid, const uint8_t *data, size_t len)
{
	send_message(fd, sid, ppid, data, len);
	echoed_messages++;
	echoed_octets += (unsigned long long)len;
}

static void hold_early(uint16_t sid, uint32_t ppid, const uint8_t *data, size_t len, int initiator)
{
	/* RFC 5043 §6.6: the active side sends no segment before the Accept,
	 * so the passive side can never see one before the Initiate. */
	if (!initiator)
		fail("a DDP segment before the Enhanced Initiate (RFC 5043 §6.6)");
	if (early_count == EARLY_MAX)
		fail("over 256 DDP segments before the Enhanced Accept");
	early[early_count].data = malloc(len);
	if (!early[early_count].data)
		fail("out of memory");
	memcpy(early[early_count].data, data, len);
	early[early_count].sid = sid;
	early[early_count].ppid = ppid;
	early[early_count].len = len;
	early_count++;
}

static void echo_early(int fd)
{
	int k;

	if (early_count > 0)
		printf("%s: %d DDP segment(s) arrived before the Enhanced Accept (unordered "
		       "delivery, RFC 5043 §8): echoed now\n", prog, early_count);
	for (k = 0; k < early_count; k++) {
		echo(fd, early[k].sid, early[k].ppid, early[k].data, early[k].len);
		free(early[k].data);
	}
	early_count = 0;
}

static void run(int fd, int initiator)
{
	static uint8_t buf[MESSAGE_MAX];
	char control[CMSG_SPACE(sizeof(struct sctp_rcvinfo))];

	if (initiator) {
		/* RFC 6581 §7: the Enhanced Initiate's private data begins with the
		 * IRD/ORD word; A=0 (client-server, no RTR on SCTP). */
		const uint8_t word[4] = { OFFER_IRD >> 8, OFFER_IRD & 0xff, OFFER_ORD >> 8,
					  OFFER_ORD & 0xff };
		send_control(fd, 0, FN_ENHANCED_INITIATE, word, sizeof(word));
		print_word("sent Enhanced Initiate (5)", word);
	}
	for (;;) {
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = control,
			.msg_controllen = sizeof(control),
		};
		struct sctp_rcvinfo info;
		struct cmsghdr *cmsg;
		int have_info = 0;
		ssize_t n;

		wait_for(fd, POLLIN, "receiving");
		n = recvmsg(fd, &msg, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0) {
			if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN) {
				summary("the association's end (reset)");
				exit(0);
			}
			die("recvmsg");
		}
		if (n == 0) {
			summary("the association's end");
			exit(0);
		}
		if (msg.msg_flags & MSG_NOTIFICATION) {
			if (on_notification(buf, (size_t)n)) {
				summary("the association's end");
				exit(0);
			}
			continue;
		}
		if (!(msg.msg_flags & MSG_EOR))
			fail("a message larger than 64 KiB (DDP messages fit one packet)");
		for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
			if (cmsg->cmsg_level == IPPROTO_SCTP && cmsg->cmsg_type == SCTP_RCVINFO) {
				memcpy(&info, CMSG_DATA(cmsg), sizeof(info));
				have_info = 1;
			}
		}
		if (!have_info)
			fail("a message without SCTP_RCVINFO");
		say_adaptation();
		if (info.rcv_ppid == htonl(PPID_SESSION_CONTROL)) {
			if (on_control(fd, info.rcv_sid, buf, (size_t)n, initiator)) {
				summary("Terminate");
				exit(0);
			}
			if (session_up)
				echo_early(fd);
		} else if (info.rcv_ppid == htonl(PPID_DDP_SEGMENT)) {
			if (!session_up) {
				hold_early(info.rcv_sid, info.rcv_ppid, buf, (size_t)n, initiator);
				continue;
			}
			echo(fd, info.rcv_sid, info.rcv_ppid, buf, (size_t)n);
		} else {
			printf("%s: error: a message with PPID %u\n", prog, ntohl(info.rcv_ppid));
			exit(1);
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: %s [-t SECS] listen PORT | connect ADDR PORT\n", prog);
	exit(64);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	char port_text[16];
	int timeout = 60, fd, conn, argi = 1, on = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argi + 1 < argc && strcmp(argv[argi], "-t") == 0) {
		timeout = atoi(argv[argi + 1]);
		argi += 2;
	}
	if (timeout <= 0 || argi >= argc)
		usage();
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout;

	/* RFC 6951: listen on, and send to, UDP port 9899 (IANA's). */
	snprintf(port_text, sizeof(port_text), "%d", UDP_ENCAPSULATION_PORT);
	sysctl_set("/proc/sys/net/sctp/udp_port", port_text);
	sysctl_set("/proc/sys/net/sctp/encap_port", port_text);

	fd = ddp_socket();
	if (strcmp(argv[argi], "listen") == 0 && argi + 2 == argc) {
		addr.sin_addr.s_addr = htonl(INADDR_ANY);
		addr.sin_port = htons((uint16_t)atoi(argv[argi + 1]));
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			die("bind");
		if (listen(fd, 1) < 0)
			die("listen");
		printf("%s: listening on SCTP port %s over UDP %d, adaptation code point %u\n", prog,
		       argv[argi + 1], UDP_ENCAPSULATION_PORT, ADAPTATION_CODE_POINT_DDP);
		wait_for(fd, POLLIN, "waiting for an association");
		conn = accept(fd, NULL, NULL);
		if (conn < 0)
			die("accept");
		close(fd);
		run(conn, 0);
	} else if (strcmp(argv[argi], "connect") == 0 && argi + 3 == argc) {
		if (inet_pton(AF_INET, argv[argi + 1], &addr.sin_addr) != 1)
			usage();
		addr.sin_port = htons((uint16_t)atoi(argv[argi + 2]));
		printf("%s: connecting to %s SCTP port %s over UDP %d, adaptation code point %u\n",
		       prog, argv[argi + 1], argv[argi + 2], UDP_ENCAPSULATION_PORT,
		       ADAPTATION_CODE_POINT_DDP);
		if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			die("connect");
		run(fd, 1);
	} else {
		usage();
	}
	return 0;
}
