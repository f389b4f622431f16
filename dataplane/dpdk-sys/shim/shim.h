/*
 * dpwarp's C shim over DPDK 22.11: the functions DPDK defines `static inline`
 * in its headers (and so exports no symbol for) and the per-lcore
 * `rte_errno`, as functions Rust can call. Each wrapper is one call of the DPDK function
 * of the same name without its `rte_` prefix; nothing here adds behaviour.
 * One more: a stdio stream whose writes go to a Rust function, for
 * `rte_openlog_stream` (fopencookie(3) has no binding in Rust's libc crate).
 */
#ifndef DPWARP_DPDK_SHIM_H
#define DPWARP_DPDK_SHIM_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <rte_bus_vdev.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_version.h>

/* rte_errno of the calling thread (a per-lcore variable, not a symbol). */
int dpw_errno(void);

uint16_t dpw_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t dpw_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t dpw_eth_tx_prepare(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

struct rte_mbuf *dpw_pktmbuf_alloc(struct rte_mempool *pool);
int dpw_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned int n);
void dpw_pktmbuf_free(struct rte_mbuf *m);
int dpw_pktmbuf_linearize(struct rte_mbuf *m);
uint16_t dpw_pktmbuf_data_room_size(struct rte_mempool *pool);
/* Empties the calling thread's own cache of `pool` into the pool's ring
 * (rte_mempool_cache_flush); nothing if the thread has no lcore id or the
 * pool no cache. */
void dpw_mempool_cache_flush_own(struct rte_mempool *pool);
/* Objects in the ring behind `pool` (its caches not counted), by acquire
 * loads of the ring's tails, so what they count was copied in before; -1
 * if the pool's driver is not DPDK's default "ring_mp_mc". */
int64_t dpw_mempool_ring_count(const struct rte_mempool *pool);

unsigned int dpw_ring_dequeue_burst(struct rte_ring *ring, void **objects, unsigned int n);

/* A write-only stream, unbuffered, each write of which calls `write(buf,
 * len)`; NULL if it cannot be made. */
FILE *dpw_log_stream(ssize_t (*write)(const char *buf, size_t len));

unsigned int dpw_lcore_id(void);
uint64_t dpw_rdtsc(void);

/* Where C puts the fields of struct rte_mbuf that dpwarp reads, so a test
 * can check bindgen's layout against the compiler's. */
struct dpw_mbuf_layout {
    uint32_t size;
    uint32_t data_off;
    uint32_t nb_segs;
    uint32_t ol_flags;
    uint32_t pkt_len;
    uint32_t data_len;
    uint32_t buf_len;
    uint32_t pool;
    uint32_t next;
    uint32_t tx_offload;
};
struct dpw_mbuf_layout dpw_mbuf_layout(void);

#endif
