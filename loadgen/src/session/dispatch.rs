//! The dispatches a session receives and what it checks in them: the
//! sequence is contiguous within a session (duplicates and gaps counted),
//! READY and RESUMED end a (re)connect, GUILD_CREATEs are read for a run
//! against servers loadgen did not make, and every MESSAGE_CREATE of the
//! generated world is checked against it (entitled, right shard, content
//! only with the intent, event numbers only growing) and timed.

use super::bytes::{find, parse_u64};
use super::recorder::Recorder;
use super::state::{Action, Session};
use crate::world::World;

impl Session {
    pub(super) fn on_dispatch(
        &mut self,
        rest: &[u8],
        whole: &[u8],
        now: u64,
        world: &World,
        rec: &mut Recorder,
    ) -> Action {
        let Some(q) = rest.iter().position(|&c| c == b'"') else {
            return self.protocol_error(now, rec, "dispatch without t".into());
        };
        let t = &rest[..q];
        let Some(after) = rest[q..].strip_prefix(b"\",\"s\":") else {
            return self.protocol_error(now, rec, "dispatch without s".into());
        };
        let (s, j) = parse_u64(after);
        if j == 0 {
            return self.protocol_error(now, rec, "dispatch with a bad s".into());
        }
        if t == b"READY" {
            rec.c.handshake_bytes += whole.len() as u64;
            let v: serde_json::Value = serde_json::from_slice(whole).unwrap_or_default();
            self.session_id = v["d"]["session_id"].as_str().map(Into::into);
            self.seq = s;
            rec.c.readies += 1;
            self.enter_streaming(now, rec);
            return Action::Continue;
        }
        // Sequence: contiguous within one session.
        if s <= self.seq {
            rec.c.duplicates += 1;
            return Action::Continue;
        }
        if s > self.seq + 1 {
            rec.c.gaps += s - self.seq - 1;
        }
        self.seq = s;
        match t {
            b"RESUMED" => {
                rec.c.resumed += 1;
                self.enter_streaming(now, rec);
            }
            b"MESSAGE_CREATE" => self.on_message(&after[j..], now, world, rec),
            b"GUILD_CREATE" => {
                rec.c.guild_creates += 1;
                rec.c.handshake_bytes += whole.len() as u64;
                rec.c.other_dispatches += 1;
                let want = rec.want_guild && rec.guild.is_none();
                if want || rec.collect_guilds {
                    let g = general_channel(whole);
                    if want {
                        rec.guild = g;
                    }
                    if let (true, Some((id, ch))) = (rec.collect_guilds, g) {
                        rec.guilds.push((id, ch, self.read_rate.is_none()));
                    }
                }
            }
            _ => rec.c.other_dispatches += 1,
        }
        Action::Continue
    }

    /// `d` as loadgen's producer writes it: `,"d":{"lg":[sched_ns,event,server,channel],...`
    /// (an event of the generated world, checked against it), or
    /// `,"d":{"ts_ns":sched_ns,...` (an event in a server loadgen did not
    /// make: only its latency is taken).
    pub(super) fn on_message(&mut self, d: &[u8], now: u64, world: &World, rec: &mut Recorder) {
        rec.c.deliveries += 1;
        self.consumed += 1;
        if self.read_rate.is_some() {
            rec.c.paced_deliveries += 1;
        }
        if let Some(ts) = d.strip_prefix(b",\"d\":{\"ts_ns\":") {
            let (sched, k) = parse_u64(ts);
            if k > 0 {
                self.record_latency(sched, rec);
            } else {
                rec.c.other_dispatches += 1;
            }
            return;
        }
        let Some(d) = d.strip_prefix(b",\"d\":{\"lg\":[") else {
            rec.c.other_dispatches += 1; // not ours (e.g. demo traffic)
            return;
        };
        let (sched, a) = parse_u64(d);
        let (event, b) = parse_u64(&d[a + 1..]);
        if event <= self.last_event {
            rec.c.event_repeats += 1;
            if rec.first_violation.is_none() {
                rec.first_violation = Some(format!(
                    "bot {} shard {} got event {event} after event {}",
                    self.bot, self.shard, self.last_event
                ));
            }
        }
        self.last_event = self.last_event.max(event);
        let (server, c) = parse_u64(&d[a + 1 + b + 1..]);
        let (chan, _) = parse_u64(&d[a + 1 + b + 1 + c + 1..]);
        let (server, chan) = (server as u32, chan as u8);
        if (server as usize) >= world.servers.len() {
            rec.c.entitlement_violations += 1;
            return;
        }
        let watched = rec.watch == Some((self.bot, server));
        if watched {
            rec.watch_last_ns = rec.watch_last_ns.max(now);
            rec.watch_count += 1;
        } else if !world.entitled(self.bot, server, chan)
            || world.shard_of(self.bot, server) != self.shard
        {
            rec.c.entitlement_violations += 1;
            if rec.first_violation.is_none() {
                rec.first_violation = Some(format!(
                    "bot {} shard {} got an event of server {server} channel {chan} it is not entitled to",
                    self.bot, self.shard
                ));
            }
        }
        if !world.sees_content(self.bot) {
            if let Some(i) = find(d, b"\"content\":\"") {
                if d.get(i + 11) != Some(&b'"') {
                    rec.c.content_violations += 1;
                }
            }
        }
        self.record_latency(sched, rec);
    }

    /// Receive time - scheduled time, while measuring (paced and stalled
    /// readers left out: their delay is their own).
    pub(super) fn record_latency(&mut self, sched: u64, rec: &mut Recorder) {
        if rec.measuring && rec.latency_exclude_bot != Some(self.bot) && self.read_rate.is_none() {
            let keep = match &rec.latency_only_bots {
                Some(only) => only.get(self.bot as usize).copied().unwrap_or(false),
                None => true,
            };
            if keep {
                let us = (crate::clock::now_ns().saturating_sub(sched) / 1000).max(1);
                rec.latency.saturating_record(us);
                if let Some(series) = rec.series.as_mut() {
                    series.record(sched, us);
                    self.lat.get_or_insert_with(Box::default).record(us);
                }
            }
        }
    }
}

/// A GUILD_CREATE's server id and its `#general` channel id.
fn general_channel(whole: &[u8]) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(whole).ok()?;
    let d = &v["d"];
    let id = d["id"].as_str()?.parse().ok()?;
    let ch = d["channels"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "general")?["id"]
        .as_str()?
        .parse()
        .ok()?;
    Some((id, ch))
}
