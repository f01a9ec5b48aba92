//! Paged KV block pool with prefix caching, after vLLM V1 `block_pool.py` / `kv_cache_manager.py`.
//!
//! - Block 0 is vLLM's null block and is never handed out: usable blocks = `num_blocks − 1`.
//! - Free blocks sit in one LRU queue (head = evicted first). Freed blocks keep their hash
//!   ("lazy deletion"), so a later request — or a preempted request resuming — can hit them.
//! - A hit on a free cached block takes it out of the queue ("touch"); allocation pops from the
//!   head and evicts the popped block's hash.
//! - `free` returns a request's blocks tail-first, so tail blocks are evicted before prefixes.
//! - Usage = `1 − free/(num_blocks − 1)`: cached-but-unreferenced blocks count as free
//!   (`BlockPool.get_usage`).
//!
//! - Blocks never used yet are not materialised: the pool keeps a watermark `fresh`, and the
//!   conceptual free queue is "every block from `fresh` up, in id order" followed by the explicit
//!   LRU list (a freed block joins the tail, behind all fresh ones, exactly as in vLLM where all
//!   blocks start in the queue in id order). Memory is O(blocks ever used), not O(pool size), so a
//!   pool of a billion blocks costs nothing until a workload fills it.
//!
//! All operations are O(blocks touched).

use std::collections::HashMap;

const NIL: u32 = u32::MAX;
const NO_HASH: u64 = 0;

#[derive(Debug, Clone)]
struct Block {
    ref_cnt: u32,
    /// Hash of the block-hash chain if the block is cached (registered in `cached`), else NO_HASH.
    hash: u64,
    prev: u32,
    next: u32,
    in_free: bool,
}

/// The KV block pool. Block ids are `u32` indices; 0 is the null block.
#[derive(Debug, Clone)]
pub struct BlockPool {
    /// Materialised blocks `0..fresh`; ids from `fresh` to `num_blocks − 1` were never used.
    blocks: Vec<Block>,
    /// Blocks in the pool, null block included.
    num_blocks: u32,
    head: u32,
    tail: u32,
    num_free: u32,
    cached: HashMap<u64, u32>,
    caching: bool,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (including the null block; at least 2, at most `u32::MAX − 1`);
    /// all usable blocks start free. Allocates nothing per block until blocks are used.
    pub fn new(num_blocks: u32, enable_prefix_caching: bool) -> BlockPool {
        let n = num_blocks.clamp(2, NIL - 1);
        BlockPool {
            // The null block is permanently referenced.
            blocks: vec![Block {
                ref_cnt: 1,
                hash: NO_HASH,
                prev: NIL,
                next: NIL,
                in_free: false,
            }],
            num_blocks: n,
            head: NIL,
            tail: NIL,
            num_free: n - 1,
            cached: HashMap::new(),
            caching: enable_prefix_caching,
        }
    }

    /// Blocks materialised so far (the null block and every block ever allocated).
    pub fn materialised(&self) -> usize {
        self.blocks.len()
    }

    /// Usable blocks (`num_blocks − 1`).
    pub fn usable(&self) -> u32 {
        self.num_blocks - 1
    }

    /// Free blocks, cached-but-unreferenced ones included.
    pub fn num_free(&self) -> u32 {
        self.num_free
    }

    /// vLLM `kv_cache_usage_perc`: `1 − free/usable`, a ratio 0–1.
    pub fn usage(&self) -> f64 {
        1.0 - f64::from(self.num_free) / f64::from(self.usable())
    }

    /// Whether prefix caching is on.
    pub fn caching(&self) -> bool {
        self.caching
    }

    fn push_tail(&mut self, b: u32) {
        let t = self.tail;
        {
            let blk = &mut self.blocks[b as usize];
            blk.prev = t;
            blk.next = NIL;
            blk.in_free = true;
        }
        if t == NIL {
            self.head = b;
        } else {
            self.blocks[t as usize].next = b;
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = {
            let blk = &self.blocks[b as usize];
            (blk.prev, blk.next)
        };
        if p == NIL {
            self.head = n;
        } else {
            self.blocks[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.blocks[n as usize].prev = p;
        }
        let blk = &mut self.blocks[b as usize];
        blk.prev = NIL;
        blk.next = NIL;
        blk.in_free = false;
        self.num_free -= 1;
    }

    /// Longest run of leading block hashes present in the cache, at most `max_blocks` long.
    /// Returns the number of hit blocks; their ids are appended to `out`.
    pub fn find_cached_prefix(
        &self,
        hashes: &[u64],
        max_blocks: usize,
        out: &mut Vec<u32>,
    ) -> usize {
        if !self.caching {
            return 0;
        }
        let mut n = 0;
        for h in hashes.iter().take(max_blocks) {
            match self.cached.get(h) {
                Some(&b) => {
                    out.push(b);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Of `hit_blocks`, how many are currently free (ref_cnt 0) — they stop being free once touched.
    pub fn count_evictable(&self, hit_blocks: &[u32]) -> u32 {
        hit_blocks
            .iter()
            .filter(|&&b| self.blocks[b as usize].ref_cnt == 0)
            .count() as u32
    }

    /// Takes a reference on cache-hit blocks, removing free ones from the LRU queue.
    pub fn touch(&mut self, hit_blocks: &[u32]) {
        for &b in hit_blocks {
            if self.blocks[b as usize].in_free {
                self.unlink(b);
            }
            self.blocks[b as usize].ref_cnt += 1;
        }
    }

    /// Pops `n` blocks from the LRU head (evicting their cached hashes) and appends them to `out`.
    /// The caller has checked `n ≤ num_free()`.
    pub fn allocate(&mut self, n: u32, out: &mut Vec<u32>) {
        for _ in 0..n {
            // Fresh blocks sit ahead of every freed one in the conceptual queue.
            let fresh = self.blocks.len() as u32;
            if fresh < self.num_blocks {
                self.blocks.push(Block {
                    ref_cnt: 1,
                    hash: NO_HASH,
                    prev: NIL,
                    next: NIL,
                    in_free: false,
                });
                self.num_free -= 1;
                out.push(fresh);
                continue;
            }
            let b = self.head;
            if b == NIL {
                return;
            }
            self.unlink(b);
            let h = self.blocks[b as usize].hash;
            if h != NO_HASH {
                if self.cached.get(&h) == Some(&b) {
                    self.cached.remove(&h);
                }
                self.blocks[b as usize].hash = NO_HASH;
            }
            self.blocks[b as usize].ref_cnt = 1;
            out.push(b);
        }
    }

    /// Registers a full block under its chain hash (first writer wins, as a dict insert would).
    pub fn cache_block(&mut self, b: u32, hash: u64) {
        if !self.caching || b == 0 || b as usize >= self.blocks.len() {
            return;
        }
        let h = if hash == NO_HASH { 1 } else { hash };
        if self.blocks[b as usize].hash != NO_HASH {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(h) {
            e.insert(b);
            self.blocks[b as usize].hash = h;
        }
    }

    /// Releases a request's blocks, tail first; blocks reaching ref_cnt 0 join the LRU tail.
    pub fn free(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().rev() {
            if b == 0 || b as usize >= self.blocks.len() {
                continue;
            }
            let blk = &mut self.blocks[b as usize];
            blk.ref_cnt = blk.ref_cnt.saturating_sub(1);
            if blk.ref_cnt == 0 && !blk.in_free {
                self.push_tail(b);
            }
        }
    }

    /// Number of blocks registered in the prefix cache.
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }
}

/// Chains a block hash: `H(parent, tokens)` (vLLM `hash_block_tokens`, no extra keys).
/// A 64-bit FNV-1a-style mix followed by a finaliser; never returns 0 (0 means "no hash").
pub fn chain_hash(parent: u64, tokens: impl Iterator<Item = u32>) -> u64 {
    let mut h: u64 = parent ^ 0x9e37_79b9_7f4a_7c15;
    for t in tokens {
        h ^= u64::from(t);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h = splitmix64(h);
    if h == NO_HASH { 1 } else { h }
}

/// SplitMix64 finaliser (Steele, Lea, Flood 2014).
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_not_usable_and_usage_counts_referenced_only() {
        let mut p = BlockPool::new(11, true);
        assert_eq!(p.usable(), 10);
        assert_eq!(p.num_free(), 10);
        let mut got = Vec::new();
        p.allocate(4, &mut got);
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert!((p.usage() - 0.4).abs() < 1e-12);
        p.cache_block(1, 77);
        p.free(&got);
        // Cached but unreferenced blocks count as free: usage back to 0.
        assert_eq!(p.num_free(), 10);
        assert_eq!(p.usage(), 0.0);
        assert_eq!(p.num_cached(), 1);
    }

    #[test]
    fn free_is_tail_first_and_allocation_evicts_lru() {
        let mut p = BlockPool::new(5, true); // usable 1..=4
        let mut a = Vec::new();
        p.allocate(4, &mut a);
        for (i, &b) in a.iter().enumerate() {
            p.cache_block(b, 100 + i as u64);
        }
        p.free(&a); // queue order: 4, 3, 2, 1
        let mut hit = Vec::new();
        assert_eq!(p.find_cached_prefix(&[100, 101, 999], 3, &mut hit), 2);
        assert_eq!(hit, vec![1, 2]);
        let mut b = Vec::new();
        p.allocate(1, &mut b);
        assert_eq!(
            b,
            vec![4],
            "the tail block of the freed request is evicted first"
        );
        let mut hit2 = Vec::new();
        assert_eq!(p.find_cached_prefix(&[100, 101, 102, 103], 4, &mut hit2), 3);
        assert_eq!(p.count_evictable(&hit2), 3);
        p.touch(&hit2);
        assert_eq!(p.num_free(), 0);
    }

    #[test]
    fn fresh_blocks_come_before_freed_ones_as_in_an_eager_queue() {
        // Eager vLLM queue of a 6-block pool: [1, 2, 3, 4, 5]. Pop 1, 2, 3 → [4, 5]; free
        // tail-first → [4, 5, 3, 2, 1]; pop three → 4, 5, 3.
        let mut p = BlockPool::new(6, false);
        let mut a = Vec::new();
        p.allocate(3, &mut a);
        assert_eq!(a, vec![1, 2, 3]);
        p.free(&a);
        assert_eq!(p.num_free(), 5);
        let mut b = Vec::new();
        p.allocate(3, &mut b);
        assert_eq!(b, vec![4, 5, 3]);
        assert_eq!(p.num_free(), 2);
        let mut c = Vec::new();
        p.allocate(5, &mut c);
        assert_eq!(c, vec![2, 1], "only the two free blocks are handed out");
        assert_eq!(p.num_free(), 0);
    }

    #[test]
    fn a_huge_pool_costs_only_the_blocks_used() {
        let mut p = BlockPool::new(u32::MAX, true);
        assert_eq!(p.usable(), u32::MAX - 2, "u32::MAX is the list terminator");
        assert_eq!(p.num_free(), u32::MAX - 2);
        assert_eq!(p.materialised(), 1, "only the null block");
        let mut a = Vec::new();
        p.allocate(1000, &mut a);
        assert_eq!(p.materialised(), 1001);
        assert_eq!(p.num_free(), u32::MAX - 1002);
        assert!(p.usage() > 0.0 && p.usage() < 1e-6);
    }
}
