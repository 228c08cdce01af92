//! The record: owned ([`Record`]), borrowed ([`RecordRef`], what producers
//! encode from) and archived ([`ArchivedRecord`], what the node reads in
//! place), plus the semantic checks every decoded record passes.

use rkyv::rancor::Fallible;
use rkyv::ser::{Allocator, Writer};
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::{munge::munge, Archive, Deserialize, Place, Serialize};

use crate::error::DecodeError;
use crate::json;

/// The wire format version this crate writes and accepts.
pub const VERSION: u16 = 1;

/// `flags` bit 0: `d` holds message content subject to the MESSAGE_CONTENT
/// rule (recipients without the intent, not mentioned, get the redacted
/// variant; see [`crate::redact_message_content`]).
pub const FLAG_HAS_CONTENT: u32 = 1 << 0;
/// `flags` bit 1: a server/channel/role/overwrite change the node applies to
/// its server snapshot (and recomputes effective permissions) before fanning
/// the event out.
pub const FLAG_GUILD_STATE: u32 = 1 << 1;
/// `flags` bit 2: a person's interaction (a slash command, a button, an
/// autocomplete, a modal submit) addressed to one application, whose bot
/// user id is `mentions[0]`; `d` is the interaction as the person made it
/// (docs/interactions.md). The node turns it into one INTERACTION_CREATE
/// (with its token) for that bot; it is not fanned out as it is.
pub const FLAG_INTERACTION: u32 = 1 << 2;
/// `flags` bit 3: only the bots named in `mentions` may receive the event,
/// whatever their intents (the INTERACTION_CREATE the node makes of a
/// [`FLAG_INTERACTION`] record; entitlement to the channel still applies).
pub const FLAG_ADDRESSED: u32 = 1 << 3;
/// Every defined flag; any other bit set makes a record malformed.
pub const KNOWN_FLAGS: u32 =
    FLAG_HAS_CONTENT | FLAG_GUILD_STATE | FLAG_INTERACTION | FLAG_ADDRESSED;

/// Longest accepted `event_type`, in bytes.
pub const MAX_EVENT_TYPE_LEN: usize = 64;

/// One committed chat event, as the chat service (or `loadgen`, or the demo
/// source) hands it to a gateway node.
///
/// The archived form ([`ArchivedRecord`], `#[repr(C)]`, little-endian,
/// naturally aligned, 80 bytes plus out-of-line data) is what travels; see
/// the crate docs and `ingest/README.md` for the byte layout and framing.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct Record {
    /// Wire format version, [`VERSION`]; must equal the frame header's.
    pub version: u16,
    /// The dispatch name `t`, e.g. `MESSAGE_CREATE`: 1 to 64 bytes of
    /// `[A-Z_]`.
    pub event_type: String,
    /// The server (guild) the event belongs to; `shard = (server_id >> 22) %
    /// shard_count`.
    pub server_id: u64,
    /// The channel, or 0 for server-wide events.
    pub channel_id: u64,
    /// Intent bits a session must have identified with, ALL of them
    /// (`session_intents & intent == intent`); 0 when none is needed.
    pub intent: u64,
    /// Permission bits the recipient needs in `channel_id`, all of them, in
    /// addition to VIEW_CHANNEL which is implicit for every channel event.
    /// Producers send 0 for server-wide events (`channel_id == 0`).
    pub permissions: u64,
    /// When the chat service committed the event (Unix ns), stamped by the
    /// producer; the node measures delivery latency from it.
    pub commit_unix_ns: u64,
    /// [`FLAG_HAS_CONTENT`] | [`FLAG_GUILD_STATE`]; other bits reserved (0).
    pub flags: u32,
    /// User ids mentioned by the message: mentioned bots get full content
    /// even without MESSAGE_CONTENT.
    pub mentions: Vec<u64>,
    /// The pre-serialised JSON `d`: UTF-8, a JSON object, spliced verbatim
    /// into `{"op":0,"t":..,"s":..,"d":<d>}`.
    pub d: Vec<u8>,
}

/// A borrowed record: what producers encode from at high rates without
/// building a [`Record`] (no `String`/`Vec` per event).
///
/// ```
/// let d = br#"{"id":"1","content":"hi"}"#;
/// let rec = ingest::RecordRef {
///     event_type: "MESSAGE_CREATE",
///     server_id: 42,
///     channel_id: 7,
///     intent: 1 << 9,
///     flags: ingest::FLAG_HAS_CONTENT,
///     d,
///     ..Default::default()
/// };
/// let mut enc = ingest::Encoder::new();
/// let mut out = Vec::new();
/// enc.encode(&rec, &mut out);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Defaults to [`VERSION`].
    pub version: u16,
    pub event_type: &'a str,
    pub server_id: u64,
    pub channel_id: u64,
    pub intent: u64,
    pub permissions: u64,
    pub commit_unix_ns: u64,
    pub flags: u32,
    pub mentions: &'a [u64],
    pub d: &'a [u8],
}

impl Default for RecordRef<'_> {
    fn default() -> Self {
        RecordRef {
            version: VERSION,
            event_type: "",
            server_id: 0,
            channel_id: 0,
            intent: 0,
            permissions: 0,
            commit_unix_ns: 0,
            flags: 0,
            mentions: &[],
            d: b"{}",
        }
    }
}

impl<'a> From<&'a Record> for RecordRef<'a> {
    fn from(r: &'a Record) -> Self {
        RecordRef {
            version: r.version,
            event_type: &r.event_type,
            server_id: r.server_id,
            channel_id: r.channel_id,
            intent: r.intent,
            permissions: r.permissions,
            commit_unix_ns: r.commit_unix_ns,
            flags: r.flags,
            mentions: &r.mentions,
            d: &r.d,
        }
    }
}

impl RecordRef<'_> {
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            version: self.version,
            event_type: self.event_type.to_owned(),
            server_id: self.server_id,
            channel_id: self.channel_id,
            intent: self.intent,
            permissions: self.permissions,
            commit_unix_ns: self.commit_unix_ns,
            flags: self.flags,
            mentions: self.mentions.to_vec(),
            d: self.d.to_vec(),
        }
    }

    /// The checks a decoder applies after bytecheck ([`check_fields`]), so a
    /// producer can refuse bad input before sending it. Encoding does not
    /// check.
    pub fn check(&self) -> Result<(), DecodeError> {
        check_fields(self.version, self.event_type.as_bytes(), self.flags, self.d)
    }
}

impl Record {
    /// See [`RecordRef::check`].
    pub fn check(&self) -> Result<(), DecodeError> {
        RecordRef::from(self).check()
    }
}

/// Resolver of [`RecordRef`]: the positions of its out-of-line data.
pub struct RecordRefResolver {
    event_type: StringResolver,
    mentions: VecResolver,
    d: VecResolver,
}

// A RecordRef archives to exactly the bytes of the equivalent Record: same
// archived type, same field order, same out-of-line order (event_type,
// mentions, d). `tests::ref_and_owned_encode_identically` holds it to that.
impl Archive for RecordRef<'_> {
    type Archived = ArchivedRecord;
    type Resolver = RecordRefResolver;

    fn resolve(&self, resolver: Self::Resolver, out: Place<Self::Archived>) {
        munge!(let ArchivedRecord {
            version,
            event_type,
            server_id,
            channel_id,
            intent,
            permissions,
            commit_unix_ns,
            flags,
            mentions,
            d,
        } = out);
        self.version.resolve((), version);
        ArchivedString::resolve_from_str(self.event_type, resolver.event_type, event_type);
        self.server_id.resolve((), server_id);
        self.channel_id.resolve((), channel_id);
        self.intent.resolve((), intent);
        self.permissions.resolve((), permissions);
        self.commit_unix_ns.resolve((), commit_unix_ns);
        self.flags.resolve((), flags);
        ArchivedVec::resolve_from_slice(self.mentions, resolver.mentions, mentions);
        ArchivedVec::resolve_from_slice(self.d, resolver.d, d);
    }
}

impl<S> Serialize<S> for RecordRef<'_>
where
    S: Fallible + Allocator + Writer + ?Sized,
    S::Error: rkyv::rancor::Source,
{
    fn serialize(&self, s: &mut S) -> Result<Self::Resolver, S::Error> {
        Ok(RecordRefResolver {
            event_type: ArchivedString::serialize_from_str(self.event_type, s)?,
            mentions: ArchivedVec::serialize_from_slice(self.mentions, s)?,
            d: ArchivedVec::serialize_from_slice(self.d, s)?,
        })
    }
}

/// Semantic checks on a record's fields (after bytecheck has established
/// memory safety and UTF-8 of `event_type`): version, reserved flags,
/// event_type syntax, `d` a UTF-8 JSON object.
pub fn check_fields(
    version: u16,
    event_type: &[u8],
    flags: u32,
    d: &[u8],
) -> Result<(), DecodeError> {
    if version != VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    if flags & !KNOWN_FLAGS != 0 {
        return Err(DecodeError::ReservedFlags(flags));
    }
    if event_type.is_empty()
        || event_type.len() > MAX_EVENT_TYPE_LEN
        || !event_type
            .iter()
            .all(|&c| c.is_ascii_uppercase() || c == b'_')
    {
        return Err(DecodeError::BadEventType);
    }
    if json::validate_json_object(d).is_err() {
        return Err(DecodeError::BadD);
    }
    Ok(())
}

/// Convenience accessors on the zero-copy archived record (native-endian
/// values, borrowed slices).
impl ArchivedRecord {
    #[inline]
    pub fn version(&self) -> u16 {
        self.version.to_native()
    }
    /// The dispatch name `t`.
    #[inline]
    pub fn event_type(&self) -> &str {
        self.event_type.as_str()
    }
    #[inline]
    pub fn server_id(&self) -> u64 {
        self.server_id.to_native()
    }
    #[inline]
    pub fn channel_id(&self) -> u64 {
        self.channel_id.to_native()
    }
    #[inline]
    pub fn intent(&self) -> u64 {
        self.intent.to_native()
    }
    #[inline]
    pub fn permissions(&self) -> u64 {
        self.permissions.to_native()
    }
    #[inline]
    pub fn commit_unix_ns(&self) -> u64 {
        self.commit_unix_ns.to_native()
    }
    #[inline]
    pub fn flags(&self) -> u32 {
        self.flags.to_native()
    }
    #[inline]
    pub fn has_content(&self) -> bool {
        self.flags() & FLAG_HAS_CONTENT != 0
    }
    #[inline]
    pub fn is_guild_state(&self) -> bool {
        self.flags() & FLAG_GUILD_STATE != 0
    }
    /// Only the bots in `mentions` may receive it.
    #[inline]
    pub fn is_addressed(&self) -> bool {
        self.flags() & FLAG_ADDRESSED != 0
    }
    /// A person's interaction for the application `mentions[0]` names.
    pub fn is_interaction(&self) -> bool {
        self.flags() & FLAG_INTERACTION != 0
    }
    /// Mentioned user ids, in the archive's little-endian representation
    /// (`.to_native()` each, or use [`mentions_user`](Self::mentions_user)).
    #[inline]
    pub fn mentions(&self) -> &[rkyv::Archived<u64>] {
        self.mentions.as_slice()
    }
    /// Whether `user_id` is among the mentions.
    #[inline]
    pub fn mentions_user(&self, user_id: u64) -> bool {
        self.mentions.iter().any(|m| m.to_native() == user_id)
    }
    /// The JSON `d` bytes (validated: UTF-8, a JSON object).
    #[inline]
    pub fn d(&self) -> &[u8] {
        self.d.as_slice()
    }
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        rkyv::deserialize::<Record, rkyv::rancor::Failure>(self)
            .expect("deserialising a checked record cannot fail")
    }
}
