//! `ChunkSlab`: a pool of fixed-size chunks allocated once, handed out by
//! index. Each chunk has one link word: on the free list it points at the
//! next free chunk; while allocated its owner may use it to chain chunks
//! (the session ring does). Indices, not pointers, so the whole pool is two
//! boxed slices and moving it is free.

use std::num::NonZeroU32;

/// Entries per chunk. 64 keeps the slack of a partly used chunk small while
/// a 5,000-entry ring still needs only 80 chunks.
pub const CHUNK: usize = 16;

/// Index of a chunk in its slab. `Option<ChunkId>` is 4 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkId(NonZeroU32);

impl ChunkId {
    fn new(index: u32) -> ChunkId {
        ChunkId(NonZeroU32::new(index + 1).expect("chunk index below u32::MAX"))
    }

    pub fn index(self) -> u32 {
        self.0.get() - 1
    }
}

pub struct ChunkSlab<T: Copy> {
    chunks: Box<[[T; CHUNK]]>,
    /// Free list link while free, owner's chain link while allocated.
    link: Box<[Option<ChunkId>]>,
    /// Only for the double-free and use-after-free assertions.
    live: Box<[bool]>,
    free_head: Option<ChunkId>,
    free_count: u32,
}

impl<T: Copy + Default> ChunkSlab<T> {
    /// Allocates all `chunks` up front; nothing is allocated afterwards.
    pub fn new(chunks: u32) -> ChunkSlab<T> {
        assert!(
            chunks < u32::MAX,
            "chunk count must leave room for the niche"
        );
        let n = chunks as usize;
        let mut link = vec![None; n].into_boxed_slice();
        for (i, l) in link.iter_mut().enumerate() {
            let next = i as u32 + 1;
            *l = (next < chunks).then(|| ChunkId::new(next));
        }
        ChunkSlab {
            chunks: vec![[T::default(); CHUNK]; n].into_boxed_slice(),
            link,
            live: vec![false; n].into_boxed_slice(),
            free_head: (chunks > 0).then(|| ChunkId::new(0)),
            free_count: chunks,
        }
    }
}

impl<T: Copy> ChunkSlab<T> {
    /// A chunk with stale contents and no chain link, or `None` if exhausted.
    pub fn alloc(&mut self) -> Option<ChunkId> {
        let id = self.free_head?;
        let i = id.index() as usize;
        debug_assert!(!self.live[i], "free list holds a live chunk");
        self.free_head = self.link[i];
        self.link[i] = None;
        self.live[i] = true;
        self.free_count -= 1;
        debug_assert_eq!(self.free_head.is_none(), self.free_count == 0);
        Some(id)
    }

    pub fn free(&mut self, id: ChunkId) {
        let i = id.index() as usize;
        debug_assert!(self.live[i], "double free of chunk {i}");
        self.live[i] = false;
        self.link[i] = self.free_head;
        self.free_head = Some(id);
        self.free_count += 1;
        debug_assert!(self.free_count <= self.capacity());
    }

    pub fn get(&self, id: ChunkId) -> &[T; CHUNK] {
        let i = id.index() as usize;
        debug_assert!(self.live[i], "read of free chunk {i}");
        &self.chunks[i]
    }

    pub fn get_mut(&mut self, id: ChunkId) -> &mut [T; CHUNK] {
        let i = id.index() as usize;
        debug_assert!(self.live[i], "write to free chunk {i}");
        &mut self.chunks[i]
    }

    /// The owner's chain link of an allocated chunk.
    pub fn next(&self, id: ChunkId) -> Option<ChunkId> {
        let i = id.index() as usize;
        debug_assert!(self.live[i]);
        self.link[i]
    }

    pub fn set_next(&mut self, id: ChunkId, next: Option<ChunkId>) {
        let i = id.index() as usize;
        debug_assert!(self.live[i]);
        self.link[i] = next;
    }

    pub fn free_count(&self) -> u32 {
        self.free_count
    }

    pub fn capacity(&self) -> u32 {
        self.chunks.len() as u32
    }
}

impl<T: Copy> std::fmt::Debug for ChunkSlab<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSlab")
            .field("capacity", &self.capacity())
            .field("free", &self.free_count)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn alloc_all_then_free_all() {
        let mut slab: ChunkSlab<u64> = ChunkSlab::new(5);
        let ids: Vec<_> = (0..5).map(|_| slab.alloc().unwrap()).collect();
        assert_eq!(slab.alloc(), None);
        assert_eq!(slab.free_count(), 0);
        let distinct: HashSet<_> = ids.iter().map(|c| c.index()).collect();
        assert_eq!(distinct.len(), 5);
        for (k, id) in ids.iter().enumerate() {
            slab.get_mut(*id)[3] = k as u64;
        }
        for (k, id) in ids.iter().enumerate() {
            assert_eq!(slab.get(*id)[3], k as u64);
        }
        for id in ids {
            slab.free(id);
        }
        assert_eq!(slab.free_count(), 5);
        assert!(slab.alloc().is_some());
    }

    #[test]
    fn empty_slab() {
        let mut slab: ChunkSlab<u8> = ChunkSlab::new(0);
        assert_eq!(slab.alloc(), None);
        assert_eq!(slab.capacity(), 0);
    }

    #[test]
    fn chain_links_survive_until_free() {
        let mut slab: ChunkSlab<u8> = ChunkSlab::new(3);
        let a = slab.alloc().unwrap();
        let b = slab.alloc().unwrap();
        assert_eq!(slab.next(a), None);
        slab.set_next(a, Some(b));
        assert_eq!(slab.next(a), Some(b));
        slab.free(b);
        let c = slab.alloc().unwrap();
        assert_eq!(c, b, "LIFO reuse keeps recently used chunks cache-warm");
        assert_eq!(slab.next(c), None, "alloc clears the link");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "double free")]
    fn double_free_asserts() {
        let mut slab: ChunkSlab<u8> = ChunkSlab::new(2);
        let a = slab.alloc().unwrap();
        slab.free(a);
        slab.free(a);
    }

    #[test]
    fn option_chunk_id_is_four_bytes() {
        assert_eq!(std::mem::size_of::<Option<ChunkId>>(), 4);
    }
}
