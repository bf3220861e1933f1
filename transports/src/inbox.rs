//! [`Inbox`]: a lock-free multi-producer, single-consumer queue for handing work to a
//! progress thread (the runtime's proxy engine takes new links from one).
//!
//! Producers push onto an atomic singly linked list (one compare-and-swap each); the
//! consumer takes the whole list with one swap and reverses it, so that items come out in
//! the order they were pushed. Because the consumer never follows a node that is still
//! reachable from the head, there is no ABA problem and no node is freed while another
//! thread can see it. crossbeam's queues cannot run under loom; this one takes its atomics
//! from [`crate::sync`], so its protocol is model-checked (see `inbox::loom_tests`).

use std::ptr;

use crate::sync::{AtomicPtr, Ordering};

/// A lock-free MPSC queue: any thread pushes, one thread at a time takes.
pub struct Inbox<T> {
    head: AtomicPtr<Node<T>>,
}

struct Node<T> {
    value: T,
    next: *mut Node<T>,
}

// SAFETY: the inbox owns its values and hands each to exactly one taker; sending it between
// threads sends the values, so `T: Send` is all it needs (no `&T` is ever shared).
unsafe impl<T: Send> Send for Inbox<T> {}
// SAFETY: as above; `push` and `take` synchronize through the head's atomics.
unsafe impl<T: Send> Sync for Inbox<T> {}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Inbox::new()
    }
}

impl<T> Inbox<T> {
    pub fn new() -> Inbox<T> {
        Inbox { head: AtomicPtr::new(ptr::null_mut()) }
    }

    /// Adds `value`; never blocks (one compare-and-swap, retried only under contention).
    pub fn push(&self, value: T) {
        let node = Box::into_raw(Box::new(Node { value, next: ptr::null_mut() }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the exchange below publishes it.
            unsafe { (*node).next = head };
            // Release: the taker's Acquire swap sees the node's contents.
            match self.head.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Moves everything pushed so far into `out`, oldest first. Meant for one consumer
    /// thread, but safe from any (concurrent takers split the items between them).
    pub fn take_into(&self, out: &mut Vec<T>) {
        let mut node = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        let start = out.len();
        while !node.is_null() {
            // SAFETY: the swap made this list ours alone: no producer or taker can reach it,
            // and every node was made by `Box::into_raw` in `push`.
            let boxed = unsafe { Box::from_raw(node) };
            node = boxed.next;
            out.push(boxed.value);
        }
        // The list is newest first.
        out[start..].reverse();
    }

    /// Whether nothing is waiting (a hint: producers may push at any time).
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire).is_null()
    }
}

impl<T> Drop for Inbox<T> {
    fn drop(&mut self) {
        let mut rest = Vec::new();
        self.take_into(&mut rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_push_order() {
        let inbox = Inbox::new();
        let mut out = Vec::new();
        inbox.take_into(&mut out);
        assert!(out.is_empty() && inbox.is_empty());
        for i in 0..5 {
            inbox.push(i);
        }
        assert!(!inbox.is_empty());
        inbox.take_into(&mut out);
        inbox.push(5);
        inbox.take_into(&mut out);
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn many_producers_lose_nothing() {
        let inbox = std::sync::Arc::new(Inbox::new());
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let inbox = inbox.clone();
                std::thread::spawn(move || (0..10_000u64).for_each(|i| inbox.push(p << 32 | i)))
            })
            .collect();
        let mut seen = Vec::new();
        while producers.iter().any(|h| !h.is_finished()) {
            inbox.take_into(&mut seen);
        }
        producers.into_iter().for_each(|h| h.join().unwrap());
        inbox.take_into(&mut seen);
        assert_eq!(seen.len(), 40_000);
        // Each producer's items arrive in its own order.
        for p in 0..4u64 {
            let mine: Vec<u64> = seen.iter().filter(|v| *v >> 32 == p).map(|v| v & 0xffff_ffff).collect();
            assert_eq!(mine, (0..10_000).collect::<Vec<_>>());
        }
    }

    #[test]
    fn dropping_frees_what_was_left() {
        let counted = std::sync::Arc::new(());
        let inbox = Inbox::new();
        for _ in 0..3 {
            inbox.push(counted.clone());
        }
        drop(inbox);
        assert_eq!(std::sync::Arc::strong_count(&counted), 1);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Every interleaving of two producers and a concurrent taker:
    //! `RUSTFLAGS="--cfg loom" cargo test -p oxccl-transports --release loom`.
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::thread;

    /// An item whose payload loom watches: reading it without a happens-before edge from
    /// the producer's write (a push/take pair that did not synchronize) is reported.
    struct Item {
        id: u32,
        payload: Arc<UnsafeCell<u32>>,
    }

    fn item(id: u32) -> Item {
        let payload = Arc::new(UnsafeCell::new(0));
        // SAFETY: nobody else has the cell yet.
        payload.with_mut(|p| unsafe { *p = id + 100 });
        Item { id, payload }
    }

    #[test]
    fn loom_inbox_two_producers_and_a_taker() {
        loom::model(|| {
            let inbox = Arc::new(Inbox::new());
            let producers: Vec<_> = (0..2u32)
                .map(|p| {
                    let inbox = inbox.clone();
                    thread::spawn(move || {
                        inbox.push(item(p * 10));
                        inbox.push(item(p * 10 + 1));
                    })
                })
                .collect();
            let mut seen = Vec::new();
            // Read while the producers may still run: only the push/take pair orders the
            // producer's write before this read.
            inbox.take_into(&mut seen);
            for it in &seen {
                // SAFETY: the producer handed the cell over by pushing it; loom checks that
                // its write happened before this read.
                assert_eq!(it.payload.with(|p| unsafe { *p }), it.id + 100);
            }
            for p in producers {
                p.join().unwrap();
            }
            inbox.take_into(&mut seen);
            let ids: Vec<u32> = seen.iter().map(|it| it.id).collect();
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 10, 11], "every item exactly once");
            for p in 0..2 {
                let mine: Vec<u32> = ids.iter().copied().filter(|v| v / 10 == p).collect();
                assert_eq!(mine, vec![p * 10, p * 10 + 1], "a producer's items in its order");
            }
        });
    }

    #[test]
    fn loom_inbox_drop_frees_nodes_pushed_concurrently() {
        // loom reports leaked allocations: nodes pushed while the taker runs must be freed
        // by a later take or by drop.
        loom::model(|| {
            let inbox = Arc::new(Inbox::new());
            let producer = {
                let inbox = inbox.clone();
                thread::spawn(move || inbox.push(Box::new(7u8)))
            };
            let mut seen = Vec::new();
            inbox.take_into(&mut seen);
            producer.join().unwrap();
            drop(inbox);
            assert!(seen.len() <= 1);
        });
    }
}
