//! The generated world: applications (bots), servers, channels,
//! installations and grants, written into the registry before a run. loadgen
//! keeps the truth so every received event can be checked against it.
//!
//! Shape (deterministic for a seed):
//! - bot sizes: half of the sessions belong to one-shard bots, 30 % to
//!   medium bots, 20 % to a few large bots with many shards;
//! - each server has `#general` (everyone sees it) and `#staff` (`@everyone`
//!   denied VIEW_CHANNEL: only bots granted ADMINISTRATOR see it);
//! - grants: 90 % of installations VIEW_CHANNEL | SEND_MESSAGES |
//!   READ_MESSAGE_HISTORY, 10 % ADMINISTRATOR;
//! - intents: 85 % of bots GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT, 10 %
//!   without MESSAGE_CONTENT (their content must arrive empty), 5 % GUILDS
//!   only (they must get no MESSAGE_CREATE at all).

use registry::{OverwriteKind, Registry};

pub use proto::intents::{GUILDS, GUILD_MESSAGES, MESSAGE_CONTENT};
pub use proto::permissions::{ADMINISTRATOR, READ_MESSAGE_HISTORY, SEND_MESSAGES, VIEW_CHANNEL};

/// Channel index within a server.
pub const PUBLIC: u8 = 0;
pub const PRIVATE: u8 = 1;

#[derive(Clone, Debug)]
pub struct WorldParams {
    pub sessions: u32,
    pub servers: u32,
    pub seed: u64,
    /// Installations per small / medium / large bot (capped at `servers`).
    pub installs: [u32; 3],
    /// Server 0 kept for this many one-shard bots only (the hot server of
    /// the slow-consumer and revocation scenarios); 0: server 0 is ordinary.
    pub hot_bots: u32,
}

impl WorldParams {
    pub fn for_sessions(sessions: u32) -> WorldParams {
        WorldParams {
            sessions,
            // Like real platforms: many servers with a handful of bots each
            // (about 5 installations per server at 40,000 sessions).
            servers: (sessions / 4).clamp(4, 20_000),
            seed: 0x5eed,
            installs: [2, 10, 50],
            hot_bots: 0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Bot {
    pub app_id: u64,
    pub token: String,
    pub shards: u32,
    pub intents: u64,
    /// Installed servers (index into `World::servers`) and whether the grant
    /// includes ADMINISTRATOR; sorted by index.
    pub servers: Vec<(u32, bool)>,
}

#[derive(Clone, Debug)]
pub struct Server {
    pub id: u64,
    /// `#general`, `#staff`.
    pub channels: [u64; 2],
}

#[derive(Debug, Default)]
pub struct World {
    pub bots: Vec<Bot>,
    pub servers: Vec<Server>,
    /// Entitled bots per server and channel (= deliveries one event makes).
    pub recipients: Vec<[u32; 2]>,
    /// The bots installed in the reserved hot server 0 (see `hot_bots`).
    pub hot_bots: Vec<u32>,
    /// Bots revoked from the hot server during the run (set by the
    /// revocation scenario once the revocation's bound has passed: any later
    /// event is a violation).
    pub revoked_hot: Vec<std::sync::atomic::AtomicBool>,
}

/// xorshift64*: small, fast, deterministic.
#[derive(Clone)]
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Shard counts of the bots that make up `sessions` sessions.
pub fn bot_sizes(sessions: u32) -> Vec<u32> {
    let large = (sessions / 625).clamp(2, 256);
    let medium = (sessions / 2500).clamp(2, 16);
    let mut sizes = Vec::new();
    let mut left = sessions;
    let take = |share: u32, shards: u32, sizes: &mut Vec<u32>, left: &mut u32| {
        let mut n = sessions as u64 * share as u64 / 100;
        while n >= shards as u64 && *left >= shards {
            sizes.push(shards);
            n -= shards as u64;
            *left -= shards;
        }
    };
    take(20, large, &mut sizes, &mut left);
    take(30, medium, &mut sizes, &mut left);
    sizes.extend(std::iter::repeat_n(1, left as usize));
    sizes
}

impl World {
    /// Writes the world into `reg` (which should be empty) and returns it.
    /// `progress` is called now and then with (done, total) bots.
    pub fn generate(
        reg: &dyn Registry,
        p: &WorldParams,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<World, String> {
        let err = |what: &str, e: registry::RegistryError| format!("registry: {what}: {e}");
        let mut rng = Rng(p.seed | 1);
        let mut servers = Vec::with_capacity(p.servers as usize);
        for i in 0..p.servers {
            let s = reg
                .create_server(&format!("loadgen-{i}"), 1)
                .map_err(|e| err("create server", e))?;
            let general = reg
                .create_channel(s.id, "general", 0, None)
                .map_err(|e| err("create channel", e))?;
            let staff = reg
                .create_channel(s.id, "staff", 0, None)
                .map_err(|e| err("create channel", e))?;
            reg.set_overwrite(staff.id, s.id, OverwriteKind::Role, 0, VIEW_CHANNEL)
                .map_err(|e| err("set overwrite", e))?;
            servers.push(Server {
                id: s.id,
                channels: [general.id, staff.id],
            });
        }
        let sizes = bot_sizes(p.sessions);
        let mut bots = Vec::with_capacity(sizes.len());
        let total = sizes.len();
        for (i, &shards) in sizes.iter().enumerate() {
            let class = match shards {
                1 => 0,
                s if s == sizes[0] && sizes[0] > 1 => 2,
                _ => 1,
            };
            let r = rng.below(100);
            let intents = if r < 85 {
                GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT
            } else if r < 95 {
                GUILDS | GUILD_MESSAGES
            } else {
                GUILDS
            };
            let (app, token) = reg
                .create_application(&format!("loadgen-{i}"), MESSAGE_CONTENT, 1)
                .map_err(|e| err("create application", e))?;
            if shards > 1 {
                reg.set_max_concurrency(app.id, 16)
                    .map_err(|e| err("set max_concurrency", e))?;
            }
            reg.set_session_start_total(app.id, 1_000_000)
                .map_err(|e| err("set session start total", e))?;
            let reserved = u32::from(p.hot_bots > 0);
            let want = p.installs[class].min(p.servers - reserved) as usize;
            let mut chosen: Vec<u32> = Vec::with_capacity(want);
            while chosen.len() < want {
                let s = reserved + rng.below((p.servers - reserved) as u64) as u32;
                if !chosen.contains(&s) {
                    chosen.push(s);
                }
            }
            chosen.sort_unstable();
            let mut installed = Vec::with_capacity(want);
            for s in chosen {
                let admin = rng.below(10) == 0;
                let grant = if admin {
                    ADMINISTRATOR
                } else {
                    VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY
                };
                reg.install(app.id, servers[s as usize].id, grant)
                    .map_err(|e| err("install", e))?;
                installed.push((s, admin));
            }
            bots.push(Bot {
                app_id: app.id,
                token,
                shards,
                intents,
                servers: installed,
            });
            if i % 500 == 0 {
                progress(i, total);
            }
        }
        progress(total, total);
        let mut hot_bots = Vec::new();
        for (b, bot) in bots.iter_mut().enumerate() {
            if hot_bots.len() as u32 >= p.hot_bots {
                break;
            }
            if bot.shards == 1 && bot.intents & MESSAGE_CONTENT != 0 {
                reg.install(
                    bot.app_id,
                    servers[0].id,
                    VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY,
                )
                .map_err(|e| err("install", e))?;
                bot.servers.insert(0, (0, false));
                hot_bots.push(b as u32);
            }
        }
        if (hot_bots.len() as u32) < p.hot_bots {
            return Err(format!(
                "only {} bots fit the hot server; use more sessions",
                hot_bots.len()
            ));
        }
        let mut w = World {
            servers,
            recipients: Vec::new(),
            revoked_hot: (0..bots.len()).map(|_| Default::default()).collect(),
            bots,
            hot_bots,
        };
        w.count_recipients();
        Ok(w)
    }

    fn count_recipients(&mut self) {
        let mut r = vec![[0u32; 2]; self.servers.len()];
        for (b, bot) in self.bots.iter().enumerate() {
            for &(s, _) in &bot.servers {
                for c in [PUBLIC, PRIVATE] {
                    if self.entitled(b as u32, s, c) {
                        r[s as usize][c as usize] += 1;
                    }
                }
            }
        }
        self.recipients = r;
    }

    /// Whether bot `b` may see a MESSAGE_CREATE in channel `c` of server `s`
    /// (on the one session whose shard covers `s`).
    pub fn entitled(&self, b: u32, s: u32, c: u8) -> bool {
        let bot = &self.bots[b as usize];
        if s == 0
            && self
                .revoked_hot
                .get(b as usize)
                .is_some_and(|r| r.load(std::sync::atomic::Ordering::Relaxed))
        {
            return false;
        }
        if bot.intents & GUILD_MESSAGES == 0 {
            return false;
        }
        match bot.servers.binary_search_by_key(&s, |&(i, _)| i) {
            Ok(k) => c == PUBLIC || bot.servers[k].1,
            Err(_) => false,
        }
    }

    /// Whether bot `b` should see message content.
    pub fn sees_content(&self, b: u32) -> bool {
        self.bots[b as usize].intents & MESSAGE_CONTENT != 0
    }

    /// The shard of bot `b` that carries server `s`.
    pub fn shard_of(&self, b: u32, s: u32) -> u32 {
        ((self.servers[s as usize].id >> 22) % self.bots[b as usize].shards as u64) as u32
    }

    /// Every session as (bot, shard), bots in order.
    pub fn sessions(&self) -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        for (b, bot) in self.bots.iter().enumerate() {
            for sh in 0..bot.shards {
                v.push((b as u32, sh));
            }
        }
        v
    }

    /// A bot installed in server `s` that sees both of its channels, with
    /// content, and has one shard (the revocation and slow-consumer target).
    pub fn pick_target(&self, s: u32) -> Option<u32> {
        self.bots.iter().enumerate().find_map(|(b, bot)| {
            let ok = bot.shards == 1
                && bot.intents & (GUILD_MESSAGES | MESSAGE_CONTENT)
                    == GUILD_MESSAGES | MESSAGE_CONTENT
                && bot.servers.iter().any(|&(i, _)| i == s);
            ok.then_some(b as u32)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_add_up() {
        for n in [10u32, 300, 2000, 40_000] {
            let s = bot_sizes(n);
            assert_eq!(s.iter().sum::<u32>(), n, "{n}");
            assert!(s.iter().filter(|&&x| x == 1).count() as u32 >= n / 2 - 1);
        }
        let s = bot_sizes(40_000);
        assert_eq!(s[0], 64);
        assert!(s.contains(&16));
    }

    #[test]
    fn generated_world_matches_the_registry() {
        let reg = registry::SqliteRegistry::open_in_memory().unwrap();
        let p = WorldParams::for_sessions(200);
        let w = World::generate(&reg, &p, |_, _| {}).unwrap();
        assert_eq!(w.sessions().len(), 200);
        for (b, bot) in w.bots.iter().enumerate() {
            let app = reg.authenticate(&bot.token).unwrap().unwrap();
            assert_eq!(app.id, bot.app_id);
            for &(s, _) in &bot.servers {
                assert!(reg
                    .installation(bot.app_id, w.servers[s as usize].id)
                    .unwrap()
                    .is_some());
                if bot.intents & GUILD_MESSAGES != 0 {
                    assert!(w.entitled(b as u32, s, PUBLIC));
                }
            }
        }
        let total: u32 = w.recipients.iter().map(|r| r[0] + r[1]).sum();
        assert!(total > 0);
    }
}
