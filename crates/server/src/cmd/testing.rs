//! A one-thread harness for unit tests of handlers: a shard, its thread's front, one client.

use std::sync::Arc;

use crate::client::Client;
use crate::config::Config;
use crate::front::Front;
use crate::node::Node;
use crate::resp::reply::Reply;
use crate::shard::Shard;
use crate::slot::SlotMap;

pub struct Harness {
    pub shard: Shard,
    pub front: Front,
    pub client: Client,
    pub out: Reply,
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(Config::default())
    }

    pub fn with_config(config: Config) -> Harness {
        let now = crate::time::wall_ms();
        let shard = Shard::new(0, config, now);
        Harness::with_shard(shard)
    }

    pub fn with_shard(shard: Shard) -> Harness {
        let now = crate::time::wall_ms();
        let (node, _inboxes) = Node::new(
            Arc::new(SlotMap::contiguous(1)),
            None,
            Vec::new(),
            String::new(),
            None,
            128,
            now,
            None,
        );
        let mut front = Front::new(0, node, crate::cmd::table());
        let a = "127.0.0.1:5000".parse().unwrap();
        let id = front.node.client_id();
        let client = Client::new(front.register_client(id, a, a, now));
        Harness {
            shard,
            front,
            client,
            out: Reply::new(),
        }
    }

    /// Runs `args` as this harness's client; returns the reply.
    pub fn run(&mut self, args: &[&str]) -> String {
        self.out.clear();
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let now = crate::time::wall_ms();
        crate::cmd::execute(
            &mut self.shard,
            &mut self.front,
            &mut self.client,
            &mut self.out,
            &argv,
            now,
        );
        String::from_utf8_lossy(&self.out.buf).into_owned()
    }

    /// Runs `args` as another, short-lived client; returns the reply.
    pub fn other(&mut self, args: &[&str]) -> String {
        let a = "127.0.0.1:5001".parse().unwrap();
        let now = crate::time::wall_ms();
        let id = self.front.node.client_id();
        let mut c = Client::new(self.front.register_client(id, a, a, now));
        let mut out = Reply::new();
        let argv: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
        crate::cmd::execute(
            &mut self.shard,
            &mut self.front,
            &mut c,
            &mut out,
            &argv,
            now,
        );
        self.front.unregister_client(c.id());
        self.shard.forget_client(c.id(), &c.dirty);
        String::from_utf8_lossy(&out.buf).into_owned()
    }
}

thread_local! {
    static FRONT: std::cell::RefCell<Option<Front>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this test thread's one-shard front.
fn with_front<R>(f: impl FnOnce(&mut Front) -> R) -> R {
    FRONT.with(|cell| {
        let mut slot = cell.borrow_mut();
        let front = slot.get_or_insert_with(|| {
            let (node, _) = Node::new(
                Arc::new(SlotMap::contiguous(1)),
                None,
                Vec::new(),
                String::new(),
                None,
                128,
                crate::time::wall_ms(),
                None,
            );
            Front::new(0, node, crate::cmd::table())
        });
        f(front)
    })
}

/// `cmd::execute` with this test thread's front, for tests that hold a shard and a client.
pub fn execute(shard: &mut Shard, client: &mut Client, out: &mut Reply, argv: &[&[u8]], now: u64) {
    with_front(|front| crate::cmd::execute(shard, front, client, out, argv, now));
}

/// Runs `args` on `shard` in database `db` as a fresh client of a one-shard test front;
/// returns the reply.
pub fn run_on(shard: &mut Shard, db: usize, args: &[&str]) -> String {
    with_front(|front| {
        let a = "127.0.0.1:5000".parse().unwrap();
        let now = crate::time::wall_ms();
        let id = front.node.client_id();
        let mut client = Client::new(front.register_client(id, a, a, now));
        client.select(db);
        let mut out = Reply::new();
        let argv: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
        crate::cmd::execute(shard, front, &mut client, &mut out, &argv, now);
        front.unregister_client(client.id());
        shard.forget_client(client.id(), &client.dirty);
        String::from_utf8_lossy(&out.buf).into_owned()
    })
}
