/* See shim.h: DPDK's inline functions, callable from Rust. */
#define _GNU_SOURCE /* fopencookie */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

int dpw_errno(void) { return rte_errno; }

uint16_t dpw_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t dpw_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_tx_burst(port, queue, pkts, n);
}

uint16_t dpw_eth_tx_prepare(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
    return rte_eth_tx_prepare(port, queue, pkts, n);
}

struct rte_mbuf *dpw_pktmbuf_alloc(struct rte_mempool *pool) { return rte_pktmbuf_alloc(pool); }

int dpw_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned int n)
{
    return rte_pktmbuf_alloc_bulk(pool, mbufs, n);
}

void dpw_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

int dpw_pktmbuf_linearize(struct rte_mbuf *m) { return rte_pktmbuf_linearize(m); }

uint16_t dpw_pktmbuf_data_room_size(struct rte_mempool *pool)
{
    return rte_pktmbuf_data_room_size(pool);
}

void dpw_mempool_cache_flush_own(struct rte_mempool *pool)
{
    /* NULL: the cache of rte_lcore_id(), none for a thread without one. */
    rte_mempool_cache_flush(NULL, pool);
}

int64_t dpw_mempool_ring_count(const struct rte_mempool *pool)
{
    const struct rte_mempool_ops *ops = rte_mempool_get_ops(pool->ops_index);
    if (strcmp(ops->name, "ring_mp_mc") != 0)
        return -1;
    const struct rte_ring *ring = pool->pool_data;
    /* As rte_ring_count, with acquire loads: an enqueue copies the objects
     * in, then publishes them by a release store of prod.tail. */
    uint32_t prod = __atomic_load_n(&ring->prod.tail, __ATOMIC_ACQUIRE);
    uint32_t cons = __atomic_load_n(&ring->cons.tail, __ATOMIC_ACQUIRE);
    uint32_t count = (prod - cons) & ring->mask;
    return count > ring->capacity ? ring->capacity : count;
}

unsigned int dpw_ring_dequeue_burst(struct rte_ring *ring, void **objects, unsigned int n)
{
    return rte_ring_dequeue_burst(ring, objects, n, NULL);
}

static ssize_t dpw_log_write(void *cookie, const char *buf, size_t len)
{
    ssize_t (*write)(const char *, size_t) = (ssize_t(*)(const char *, size_t))cookie;
    return write(buf, len);
}

FILE *dpw_log_stream(ssize_t (*write)(const char *buf, size_t len))
{
    cookie_io_functions_t io = { .read = NULL, .write = dpw_log_write, .seek = NULL, .close = NULL };
    FILE *f = fopencookie((void *)write, "w", io);
    if (f != NULL)
        setvbuf(f, NULL, _IONBF, 0);
    return f;
}

unsigned int dpw_lcore_id(void) { return rte_lcore_id(); }

uint64_t dpw_rdtsc(void) { return rte_rdtsc(); }

struct dpw_mbuf_layout dpw_mbuf_layout(void)
{
    struct dpw_mbuf_layout l = {
        .size = sizeof(struct rte_mbuf),
        .data_off = offsetof(struct rte_mbuf, data_off),
        .nb_segs = offsetof(struct rte_mbuf, nb_segs),
        .ol_flags = offsetof(struct rte_mbuf, ol_flags),
        .pkt_len = offsetof(struct rte_mbuf, pkt_len),
        .data_len = offsetof(struct rte_mbuf, data_len),
        .buf_len = offsetof(struct rte_mbuf, buf_len),
        .pool = offsetof(struct rte_mbuf, pool),
        .next = offsetof(struct rte_mbuf, next),
        .tx_offload = offsetof(struct rte_mbuf, tx_offload),
    };
    return l;
}
