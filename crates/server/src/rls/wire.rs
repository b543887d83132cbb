//! `ShouldRateLimit`'s two messages on the wire, read and written here.
//!
//! Why not prost's structs: decoding a `RateLimitRequest` allocates a
//! `String` for the domain and for each entry's key and value, and a `Vec`
//! for each descriptor — copies the call only reads — and encoding the
//! answer needs a struct of owned strings built for the purpose. Here the
//! request is read as views borrowed from the message's bytes, and the
//! answer is written straight from borrowed parts into its frame.
//!
//! Both follow protobuf's rules as prost applies them: fields in any
//! order; the last of a repeated scalar wins; a repeated singular message
//! (a descriptor's `limit`, its `hits_addend`) merges field by field;
//! unknown fields, groups among them, are skipped, within prost's nesting
//! limit; strings must be UTF-8. The tests hold both directions to prost
//! itself, on random messages and on random bytes (`wire/tests.rs`).

use std::fmt;
use std::ops::Range;

use bytes::BufMut;

/// A descriptor entry: `key` and `value`, borrowed from the message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// A descriptor's own `limit` (`RateLimitOverride`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Override {
    pub requests_per_unit: u32,
    /// `envoy.type.v3.RateLimitUnit`, as sent (unknown values included).
    pub unit: i32,
}

/// One descriptor of the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Its entries within [`RateLimitCall::entries`] (at most
    /// [`MAX_ENTRIES`] of them are kept).
    entries: Range<usize>,
    /// How many entries it carried, kept or not.
    pub entry_count: usize,
    pub limit: Option<Override>,
    /// `hits_addend` (`google.protobuf.UInt64Value`), when set.
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`: the hits are units given back (a refund).
    pub negative_hits: bool,
}

/// A `RateLimitRequest`, borrowed from its bytes. Descriptors and entries
/// beyond the protocol's bounds are counted, not kept: the call refuses
/// them by their count, and a large message cannot make a larger copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitCall<'a> {
    pub domain: &'a str,
    /// The request-level `hits_addend` (0: unset).
    pub hits_addend: u32,
    descriptors: Vec<Descriptor>,
    /// How many descriptors it carried, kept or not.
    pub descriptor_count: usize,
    entries: Vec<Entry<'a>>,
}

/// The most descriptors kept (the most a call may carry).
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries kept a descriptor (the most one may carry).
pub const MAX_ENTRIES: usize = crate::envoy_rules::MAX_DEPTH;

impl<'a> RateLimitCall<'a> {
    /// The descriptors kept, in the request's order.
    pub fn descriptors(&self) -> &[Descriptor] {
        &self.descriptors
    }

    /// A kept descriptor's kept entries.
    pub fn entries(&self, descriptor: &Descriptor) -> &[Entry<'a>] {
        self.entries.get(descriptor.entries.clone()).unwrap_or(&[])
    }
}

/// Why a message could not be read: where, and what was wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    /// The field path, e.g. `descriptors[0].entries[1].value`.
    pub at: String,
    pub fault: Fault,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The bytes end inside a field.
    Truncated,
    /// A varint longer than ten bytes or above 2^64.
    BadVarint,
    /// A field key naming tag 0, a wire type above 5, or above 2^32.
    BadKey,
    /// A known field sent with another wire type.
    WrongWireType,
    /// A group's end without its start, or with another tag.
    BadGroup,
    /// Messages and groups nested deeper than prost's limit (100).
    TooDeep,
    /// A string that is not UTF-8.
    NotUtf8,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.fault {
            Fault::Truncated => "the bytes end inside a field",
            Fault::BadVarint => "a varint is malformed",
            Fault::BadKey => "a field key is malformed",
            Fault::WrongWireType => "a field has the wrong wire type",
            Fault::BadGroup => "a group is malformed",
            Fault::TooDeep => "fields are nested too deeply",
            Fault::NotUtf8 => "a string is not UTF-8",
        };
        if self.at.is_empty() {
            f.write_str(what)
        } else {
            write!(f, "{}: {what}", self.at)
        }
    }
}

/// prost's recursion limit: a message or group may nest this deep.
const NESTING: u32 = 100;

/// Protobuf's wire types.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    Varint,
    Fixed64,
    Len,
    StartGroup,
    EndGroup,
    Fixed32,
}

/// Where in the message a read is: the path only named on a fault.
#[derive(Clone, Copy)]
enum At {
    Top,
    Descriptor(usize),
    Entry(usize, usize),
    Limit(usize),
    Hits(usize),
}

impl At {
    fn field(self, name: &str) -> String {
        let mut at = match self {
            At::Top => String::new(),
            At::Descriptor(d) => format!("descriptors[{d}]."),
            At::Entry(d, e) => format!("descriptors[{d}].entries[{e}]."),
            At::Limit(d) => format!("descriptors[{d}].limit."),
            At::Hits(d) => format!("descriptors[{d}].hits_addend."),
        };
        at.push_str(name);
        at
    }

    fn fail(self, name: &str, fault: Fault) -> WireError {
        WireError {
            at: self.field(name),
            fault,
        }
    }
}

/// Reads a message's fields from the front of its bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, Fault> {
        let mut value = 0u64;
        for (i, &byte) in self.bytes.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                // The tenth byte holds the 64th bit alone.
                if i == 9 && byte > 1 {
                    return Err(Fault::BadVarint);
                }
                self.bytes = &self.bytes[i + 1..];
                return Ok(value);
            }
        }
        Err(if self.bytes.len() < 10 {
            Fault::Truncated
        } else {
            Fault::BadVarint
        })
    }

    /// The next field's tag and wire type; `None` at the end.
    fn key(&mut self) -> Result<Option<(u32, Wire)>, Fault> {
        if self.bytes.is_empty() {
            return Ok(None);
        }
        let key = self.varint().map_err(|f| match f {
            Fault::Truncated => Fault::BadVarint,
            other => other,
        })?;
        let key = u32::try_from(key).map_err(|_| Fault::BadKey)?;
        let tag = key >> 3;
        let wire = match key & 7 {
            0 => Wire::Varint,
            1 => Wire::Fixed64,
            2 => Wire::Len,
            3 => Wire::StartGroup,
            4 => Wire::EndGroup,
            5 => Wire::Fixed32,
            _ => return Err(Fault::BadKey),
        };
        if tag == 0 {
            return Err(Fault::BadKey);
        }
        Ok(Some((tag, wire)))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], Fault> {
        let n = usize::try_from(n).map_err(|_| Fault::Truncated)?;
        if n > self.bytes.len() {
            return Err(Fault::Truncated);
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    /// A length-delimited field's bytes.
    fn len_delimited(&mut self) -> Result<&'a [u8], Fault> {
        let n = self.varint()?;
        self.take(n)
    }

    fn string(&mut self, wire: Wire) -> Result<&'a str, Fault> {
        expect(wire, Wire::Len)?;
        std::str::from_utf8(self.len_delimited()?).map_err(|_| Fault::NotUtf8)
    }

    fn scalar(&mut self, wire: Wire) -> Result<u64, Fault> {
        expect(wire, Wire::Varint)?;
        self.varint()
    }

    /// A nested message's bytes, `depth` levels in.
    fn message(&mut self, wire: Wire, depth: u32) -> Result<&'a [u8], Fault> {
        expect(wire, Wire::Len)?;
        if depth == 0 {
            return Err(Fault::TooDeep);
        }
        self.len_delimited()
    }

    /// Skips an unknown field (a group with all it holds).
    fn skip(&mut self, tag: u32, wire: Wire, depth: u32) -> Result<(), Fault> {
        if depth == 0 {
            return Err(Fault::TooDeep);
        }
        match wire {
            Wire::Varint => self.varint().map(drop),
            Wire::Fixed64 => self.take(8).map(drop),
            Wire::Fixed32 => self.take(4).map(drop),
            Wire::Len => self.len_delimited().map(drop),
            Wire::StartGroup => loop {
                match self.key()? {
                    None => return Err(Fault::BadVarint),
                    Some((inner, Wire::EndGroup)) if inner == tag => return Ok(()),
                    Some((_, Wire::EndGroup)) => return Err(Fault::BadGroup),
                    Some((inner, wire)) => self.skip(inner, wire, depth - 1)?,
                }
            },
            Wire::EndGroup => Err(Fault::BadGroup),
        }
    }
}

fn expect(got: Wire, wanted: Wire) -> Result<(), Fault> {
    if got == wanted {
        Ok(())
    } else {
        Err(Fault::WrongWireType)
    }
}

/// Reads a `RateLimitRequest` message (without its gRPC prefix).
pub fn read_request(bytes: &[u8]) -> Result<RateLimitCall<'_>, WireError> {
    let mut call = RateLimitCall::default();
    let mut r = Reader { bytes };
    let depth = NESTING;
    while let Some((tag, wire)) = r.key().map_err(|f| At::Top.fail("", f))? {
        match tag {
            1 => call.domain = r.string(wire).map_err(|f| At::Top.fail("domain", f))?,
            2 => {
                let d = call.descriptor_count;
                let inner = r
                    .message(wire, depth)
                    .map_err(|f| At::Top.fail(&format!("descriptors[{d}]"), f))?;
                read_descriptor(&mut call, d, inner, depth - 1)?;
                call.descriptor_count += 1;
            }
            3 => {
                // uint32: the varint's low 32 bits, as prost reads it.
                call.hits_addend =
                    r.scalar(wire).map_err(|f| At::Top.fail("hits_addend", f))? as u32;
            }
            _ => r.skip(tag, wire, depth).map_err(|f| At::Top.fail("", f))?,
        }
    }
    Ok(call)
}

fn read_descriptor<'a>(
    call: &mut RateLimitCall<'a>,
    d: usize,
    bytes: &'a [u8],
    depth: u32,
) -> Result<(), WireError> {
    let at = At::Descriptor(d);
    let keep = d < MAX_DESCRIPTORS;
    let start = call.entries.len();
    let mut descriptor = Descriptor::default();
    let mut r = Reader { bytes };
    while let Some((tag, wire)) = r.key().map_err(|f| at.fail("", f))? {
        match tag {
            1 => {
                let e = descriptor.entry_count;
                let inner = r
                    .message(wire, depth)
                    .map_err(|f| at.fail(&format!("entries[{e}]"), f))?;
                let entry = read_entry(At::Entry(d, e), inner, depth - 1)?;
                if keep && e < MAX_ENTRIES {
                    call.entries.push(entry);
                }
                descriptor.entry_count += 1;
            }
            2 => {
                let inner = r.message(wire, depth).map_err(|f| at.fail("limit", f))?;
                let limit = descriptor.limit.get_or_insert_with(Override::default);
                read_override(limit, At::Limit(d), inner, depth - 1)?;
            }
            3 => {
                let inner = r
                    .message(wire, depth)
                    .map_err(|f| at.fail("hits_addend", f))?;
                let hits = descriptor.hits_addend.get_or_insert(0);
                read_u64_value(hits, At::Hits(d), inner, depth - 1)?;
            }
            4 => {
                // is_negative_hits: a bool, its last value wins.
                descriptor.negative_hits =
                    r.scalar(wire).map_err(|f| at.fail("is_negative_hits", f))? != 0;
            }
            _ => r.skip(tag, wire, depth).map_err(|f| at.fail("", f))?,
        }
    }
    if keep {
        descriptor.entries = start..call.entries.len();
        call.descriptors.push(descriptor);
    }
    Ok(())
}

fn read_entry(at: At, bytes: &[u8], depth: u32) -> Result<Entry<'_>, WireError> {
    let mut entry = Entry::default();
    let mut r = Reader { bytes };
    while let Some((tag, wire)) = r.key().map_err(|f| at.fail("", f))? {
        match tag {
            1 => entry.key = r.string(wire).map_err(|f| at.fail("key", f))?,
            2 => entry.value = r.string(wire).map_err(|f| at.fail("value", f))?,
            _ => r.skip(tag, wire, depth).map_err(|f| at.fail("", f))?,
        }
    }
    Ok(entry)
}

fn read_override(limit: &mut Override, at: At, bytes: &[u8], depth: u32) -> Result<(), WireError> {
    let mut r = Reader { bytes };
    while let Some((tag, wire)) = r.key().map_err(|f| at.fail("", f))? {
        match tag {
            // uint32 and an enum (int32): the low 32 bits, as prost reads them.
            1 => {
                limit.requests_per_unit =
                    r.scalar(wire)
                        .map_err(|f| at.fail("requests_per_unit", f))? as u32;
            }
            2 => limit.unit = r.scalar(wire).map_err(|f| at.fail("unit", f))? as i32,
            _ => r.skip(tag, wire, depth).map_err(|f| at.fail("", f))?,
        }
    }
    Ok(())
}

fn read_u64_value(value: &mut u64, at: At, bytes: &[u8], depth: u32) -> Result<(), WireError> {
    let mut r = Reader { bytes };
    while let Some((tag, wire)) = r.key().map_err(|f| at.fail("", f))? {
        match tag {
            1 => *value = r.scalar(wire).map_err(|f| at.fail("value", f))?,
            _ => r.skip(tag, wire, depth).map_err(|f| at.fail("", f))?,
        }
    }
    Ok(())
}

// ---- the answer ----

/// `RateLimitResponse.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok = 1,
    OverLimit = 2,
}

impl Code {
    pub fn of(over: bool) -> Self {
        if over { Code::OverLimit } else { Code::Ok }
    }
}

/// A descriptor's `current_limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CurrentLimit<'a> {
    pub name: &'a str,
    pub requests_per_unit: u32,
    /// `RateLimitResponse.RateLimit.Unit`.
    pub unit: i32,
}

/// One descriptor's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorStatus<'a> {
    pub code: Code,
    pub current_limit: Option<CurrentLimit<'a>>,
    pub limit_remaining: u32,
    /// `duration_until_reset`, in milliseconds.
    pub reset_ms: Option<u64>,
}

/// A header for Envoy to add to its response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// Writes a `RateLimitResponse` message into `out`: its length, as a
/// gRPC message's prefix wants it, is [`response_len`].
pub fn write_response(
    out: &mut impl BufMut,
    overall: Code,
    statuses: &[DescriptorStatus<'_>],
    headers: &[Header<'_>],
) {
    put_varint_field(out, 1, overall as u64);
    for status in statuses {
        put_key(out, 2, Wire::Len);
        put_varint(out, status_len(status) as u64);
        put_status(out, status);
    }
    for header in headers {
        put_key(out, 3, Wire::Len);
        put_varint(out, header_len(header) as u64);
        put_str_field(out, 1, header.key);
        put_str_field(out, 2, header.value);
    }
}

/// The length of what [`write_response`] writes.
pub fn response_len(
    overall: Code,
    statuses: &[DescriptorStatus<'_>],
    headers: &[Header<'_>],
) -> usize {
    varint_field_len(1, overall as u64)
        + statuses
            .iter()
            .map(|s| nested_len(2, status_len(s)))
            .sum::<usize>()
        + headers
            .iter()
            .map(|h| nested_len(3, header_len(h)))
            .sum::<usize>()
}

fn put_status(out: &mut impl BufMut, s: &DescriptorStatus<'_>) {
    put_varint_field(out, 1, s.code as u64);
    if let Some(limit) = &s.current_limit {
        put_key(out, 2, Wire::Len);
        put_varint(out, limit_len(limit) as u64);
        put_varint_field(out, 1, u64::from(limit.requests_per_unit));
        put_varint_field(out, 2, enum_varint(limit.unit));
        put_str_field(out, 3, limit.name);
    }
    put_varint_field(out, 3, u64::from(s.limit_remaining));
    if let Some(ms) = s.reset_ms {
        let (seconds, nanos) = duration(ms);
        put_key(out, 4, Wire::Len);
        put_varint(out, duration_len(seconds, nanos) as u64);
        put_varint_field(out, 1, seconds);
        put_varint_field(out, 2, nanos);
    }
}

fn status_len(s: &DescriptorStatus<'_>) -> usize {
    varint_field_len(1, s.code as u64)
        + s.current_limit
            .as_ref()
            .map_or(0, |l| nested_len(2, limit_len(l)))
        + varint_field_len(3, u64::from(s.limit_remaining))
        + s.reset_ms.map_or(0, |ms| {
            let (seconds, nanos) = duration(ms);
            nested_len(4, duration_len(seconds, nanos))
        })
}

fn limit_len(l: &CurrentLimit<'_>) -> usize {
    varint_field_len(1, u64::from(l.requests_per_unit))
        + varint_field_len(2, enum_varint(l.unit))
        + str_field_len(3, l.name)
}

fn header_len(h: &Header<'_>) -> usize {
    str_field_len(1, h.key) + str_field_len(2, h.value)
}

/// `google.protobuf.Duration`'s seconds and nanos (as varints) of `ms`.
fn duration(ms: u64) -> (u64, u64) {
    // Seconds below 2^63 (ms / 1000 < 2^54); nanos below 10^9.
    (ms / 1000, (ms % 1000) * 1_000_000)
}

fn duration_len(seconds: u64, nanos: u64) -> usize {
    varint_field_len(1, seconds) + varint_field_len(2, nanos)
}

/// An int32 (an enum) as protobuf writes it: negative ones sign-extended.
fn enum_varint(value: i32) -> u64 {
    i64::from(value) as u64
}

fn put_key(out: &mut impl BufMut, tag: u32, wire: Wire) {
    let wire = match wire {
        Wire::Varint => 0,
        Wire::Fixed64 => 1,
        Wire::Len => 2,
        Wire::StartGroup => 3,
        Wire::EndGroup => 4,
        Wire::Fixed32 => 5,
    };
    put_varint(out, u64::from(tag << 3 | wire));
}

fn put_varint(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn varint_len(value: u64) -> usize {
    // 1 byte a started 7 bits (1 for 0).
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// A scalar field, left out at its default (0), as proto3 does.
fn put_varint_field(out: &mut impl BufMut, tag: u32, value: u64) {
    if value != 0 {
        put_key(out, tag, Wire::Varint);
        put_varint(out, value);
    }
}

fn varint_field_len(tag: u32, value: u64) -> usize {
    if value == 0 {
        0
    } else {
        varint_len(u64::from(tag << 3)) + varint_len(value)
    }
}

/// A string field, left out when empty, as proto3 does.
fn put_str_field(out: &mut impl BufMut, tag: u32, value: &str) {
    if !value.is_empty() {
        put_key(out, tag, Wire::Len);
        put_varint(out, value.len() as u64);
        out.put_slice(value.as_bytes());
    }
}

fn str_field_len(tag: u32, value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        nested_len(tag, value.len())
    }
}

/// A length-delimited field of `len` bytes, with its key and length.
fn nested_len(tag: u32, len: usize) -> usize {
    varint_len(u64::from(tag << 3)) + varint_len(len as u64) + len
}

#[cfg(test)]
mod tests;
