//! The engine's second lower layer, DDP over SCTP (`Rnic::handle_message`,
//! RFC 5043), on arbitrary messages from a peer, in any order.
//!
//! Input: a sequence of messages, each one length octet and that many
//! octets (`DDP-SSN | DDP segment`), fed to side `b` of a message-link
//! `RnicPair` whose `b` has registered memory of every kind and posted
//! receives; whatever `b` answers is delivered to `a`. The reorder window
//! is small (16 messages, 512 octets) so that its bounds are reached.
//!
//! Asserts: no panic and no hang; `b` ends in RTS or Error, and in Error
//! it sent exactly one Terminate or received one; every receive `b` had
//! posted either completed or is still posted, never lost.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::mem::Access;
use rnic_engine::pair::{self, Link, PairConfig, RnicPair};
use rnic_engine::sctp::rx::ReorderConfig;
use rnic_engine::verbs::{MessageConnection, QpEvent, QpInit, QpState, RecvWr, Sge};

const RECEIVES: u64 = 4;

fuzz_target!(|data: &[u8]| {
    let config = PairConfig {
        emss: rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
        ird_ord: 2,
        link: Link::Messages,
        ..PairConfig::default()
    };
    let mut pair = RnicPair::new(config).expect("pair");
    let qp = pair
        .b
        .rnic
        .create_qp(QpInit {
            pd: pair.b.pd,
            send_cq: pair.b.cq,
            recv_cq: pair.b.cq,
            srq: None,
            sq_size: 8,
            rq_size: 8,
        })
        .expect("qp");
    let connection = MessageConnection {
        reorder: ReorderConfig {
            messages: 16,
            octets: 512,
        },
        ..pair::message_connection(&config)
    };
    pair.b
        .rnic
        .connect_messages(qp, connection)
        .expect("connect");
    let a_qp = pair.a.rnic.create_qp(QpInit {
        pd: pair.a.pd,
        send_cq: pair.a.cq,
        recv_cq: pair.a.cq,
        srq: None,
        sq_size: 8,
        rq_size: 8,
    });
    let a_qp = a_qp.expect("qp");
    pair.a
        .rnic
        .connect_messages(a_qp, pair::message_connection(&config))
        .expect("connect");
    pair.link(a_qp, qp);
    for access in [
        Access::REMOTE_WRITE,
        Access::REMOTE_READ,
        Access::REMOTE_ATOMIC,
    ] {
        let (region, _) = pair.b.region(256, access).expect("region");
        region.write(0, &[0x5A; 256]).expect("fits");
    }
    let (_, recv_mr) = pair.b.region(256, Access::LOCAL_WRITE).expect("region");
    for i in 0..RECEIVES {
        let sgl = [Sge {
            stag: recv_mr.stag,
            to: 64 * i,
            len: 64,
        }];
        let wr = RecvWr {
            wr_id: i,
            sgl: &sgl,
        };
        pair.b.rnic.post_recv(qp, &wr).expect("receive");
    }
    let mut rest = data;
    while let [len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        pair.b.rnic.handle_message(qp, &tail[..n]).expect("qp");
        rest = &tail[n..];
    }
    pair.run(10_000);
    let events: Vec<QpEvent> =
        std::iter::from_fn(|| pair.b.rnic.poll_event(qp).expect("qp")).collect();
    let completions = pair
        .b
        .completions()
        .into_iter()
        .filter(|wc| wc.qp == qp)
        .count() as u64;
    match pair.b.rnic.qp_state(qp).expect("qp") {
        QpState::Rts => assert!(events.is_empty(), "{events:?}"),
        QpState::Error => {
            assert_eq!(events.len(), 1, "one Terminate: {events:?}");
            assert_eq!(completions, RECEIVES, "every receive completes");
        }
        other => panic!("b left in {other:?}"),
    }
    assert!(completions <= RECEIVES);
});
