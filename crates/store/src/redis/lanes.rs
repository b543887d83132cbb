//! Lanes: a batching queue with its own connection for each thread that
//! runs a single-threaded runtime and decides through a store (tollgate's
//! HTTP workers), so a decision, its batch and its reply stay on one thread.
//!
//! A lane opens in the background: until its connection is open (its
//! prelude sent), the thread's decisions go through the store's own queue,
//! whose connection opened when the store connected. A thread's first
//! decision therefore never waits for a connection to open: over a far
//! link that alone took two round trips.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::connection::Connection;
use super::{RedisStore, Shared, batch};

/// How soon a lane that could not open is tried again.
const RETRY: Duration = Duration::from_secs(1);

enum Lane {
    Opening,
    Open(mpsc::Sender<batch::Job>),
    /// Could not open; tried again after this.
    Failed(Instant),
}

thread_local! {
    /// This thread's lanes, one per store. A few stores at most.
    static LANES: RefCell<Vec<(Weak<Shared>, Lane)>> = const { RefCell::new(Vec::new()) };
}

impl RedisStore {
    /// The batching queue for this thread: its lane when the thread runs a
    /// single-threaded runtime and the lane is open, else the store's own
    /// (starting to open the lane when none is).
    pub(super) fn queue(&self) -> mpsc::Sender<batch::Job> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let single = Handle::try_current()
            .is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if !single {
            return self.queue.clone();
        }
        let start = LANES.with(|lanes| {
            let mut lanes = lanes.borrow_mut();
            lanes.retain(|(shared, _)| shared.strong_count() > 0);
            match lanes.iter_mut().find(|(shared, _)| self.is(shared)) {
                Some((_, Lane::Open(queue))) => Err(queue.clone()),
                Some((_, Lane::Failed(until))) if Instant::now() >= *until => {
                    lanes.retain(|(shared, _)| !self.is(shared));
                    lanes.push((Arc::downgrade(&self.shared), Lane::Opening));
                    Ok(())
                }
                Some(_) => Err(self.queue.clone()),
                None => {
                    lanes.push((Arc::downgrade(&self.shared), Lane::Opening));
                    Ok(())
                }
            }
        });
        if let Err(queue) = start {
            return queue;
        }
        let store = self.clone();
        tokio::spawn(async move {
            let opened = store.open_lane().await;
            LANES.with(|lanes| {
                let mut lanes = lanes.borrow_mut();
                if let Some((_, lane)) = lanes.iter_mut().find(|(shared, _)| store.is(shared)) {
                    *lane = opened.map_or_else(|| Lane::Failed(Instant::now() + RETRY), Lane::Open);
                }
            });
        });
        self.queue.clone()
    }

    /// A new connection, once open, with its batching task.
    async fn open_lane(&self) -> Option<mpsc::Sender<batch::Job>> {
        let connection = Connection::open(
            &self.config,
            Arc::clone(&self.shared.scales),
            Arc::clone(&self.shared.script_calls),
        )
        .await
        .ok()?;
        connection.ready().await.ok()?;
        let (queue, jobs) = mpsc::channel(self.config.batch.queue);
        tokio::spawn(batch::gather(
            jobs,
            Arc::clone(&self.shared),
            connection,
            self.config.batch,
        ));
        Some(queue)
    }

    fn is(&self, shared: &Weak<Shared>) -> bool {
        std::ptr::eq(shared.as_ptr(), Arc::as_ptr(&self.shared))
    }
}
