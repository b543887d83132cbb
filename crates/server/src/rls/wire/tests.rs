//! The hand-read request and hand-written answer held to prost, which
//! generated code the rest of the Envoy world decodes with.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry as ProstEntry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    DescriptorStatus as ProstStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::{Duration as ProstDuration, UInt64Value};
use proptest::prelude::*;
use prost::Message;

use super::*;

/// A read request, owned: (domain, hits_addend, descriptor count, each
/// kept descriptor's (entries, entry count, limit, hits_addend,
/// is_negative_hits)).
type Read = (
    String,
    u32,
    usize,
    Vec<(
        Vec<(String, String)>,
        usize,
        Option<Override>,
        Option<u64>,
        bool,
    )>,
);

/// What prost read, in the shape this module keeps: descriptors and
/// entries beyond the bounds counted, not kept.
fn as_prost_reads(bytes: &[u8]) -> Option<Read> {
    let request = RateLimitRequest::decode(bytes).ok()?;
    let descriptors = request
        .descriptors
        .iter()
        .take(MAX_DESCRIPTORS)
        .map(|d| {
            (
                d.entries
                    .iter()
                    .take(MAX_ENTRIES)
                    .map(|e| (e.key.clone(), e.value.clone()))
                    .collect(),
                d.entries.len(),
                d.limit.map(|l| Override {
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit,
                }),
                d.hits_addend.map(|h| h.value),
                d.is_negative_hits,
            )
        })
        .collect();
    Some((
        request.domain,
        request.hits_addend,
        request.descriptors.len(),
        descriptors,
    ))
}

fn as_read_here(bytes: &[u8]) -> Option<Read> {
    let call = read_request(bytes).ok()?;
    let descriptors = call
        .descriptors()
        .iter()
        .map(|d| {
            (
                call.entries(d)
                    .iter()
                    .map(|e| (e.key.to_owned(), e.value.to_owned()))
                    .collect(),
                d.entry_count,
                d.limit,
                d.hits_addend,
                d.negative_hits,
            )
        })
        .collect();
    Some((
        call.domain.to_owned(),
        call.hits_addend,
        call.descriptor_count,
        descriptors,
    ))
}

fn request_strategy() -> impl Strategy<Value = RateLimitRequest> {
    let text = prop_oneof![Just(String::new()), "[a-z_]{1,8}", any::<String>(),];
    let entry = (text.clone(), text.clone()).prop_map(|(key, value)| ProstEntry { key, value });
    let descriptor = (
        prop::collection::vec(entry, 0..5),
        prop::option::of((any::<u32>(), -2i32..10)),
        prop::option::of(any::<u64>()),
        any::<bool>(),
    )
        .prop_map(|(entries, limit, hits, negative)| RateLimitDescriptor {
            entries,
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            hits_addend: hits.map(|value| UInt64Value { value }),
            is_negative_hits: negative,
        });
    (text, prop::collection::vec(descriptor, 0..5), any::<u32>()).prop_map(
        |(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        },
    )
}

/// Bytes that are often nearly a request: a real one cut, spliced,
/// flipped, or with unknown fields and groups put in.
fn mangled_strategy() -> impl Strategy<Value = Vec<u8>> {
    (
        request_strategy(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 0..4),
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(request, edits, cut)| {
            let mut bytes = request.encode_to_vec();
            for (at, byte, kind) in edits {
                let i = if bytes.is_empty() {
                    0
                } else {
                    at.index(bytes.len())
                };
                match kind {
                    0 if !bytes.is_empty() => bytes[i] = byte,
                    1 => bytes.insert(i.min(bytes.len()), byte),
                    2 if !bytes.is_empty() => {
                        bytes.remove(i);
                    }
                    _ => {
                        // An unknown field: a group (tag 9) holding a varint.
                        let group = [0x4b, 0x08, byte & 0x7f, 0x4c];
                        let i = i.min(bytes.len());
                        bytes.splice(i..i, group);
                    }
                }
            }
            if let Some(cut) = cut {
                let n = bytes.len();
                bytes.truncate(cut.index(n + 1));
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_request_reads_as_prost_reads_it(request in request_strategy()) {
        let bytes = request.encode_to_vec();
        let here = as_read_here(&bytes);
        prop_assert!(here.is_some());
        prop_assert_eq!(here, as_prost_reads(&bytes));
    }

    #[test]
    fn any_bytes_are_accepted_or_refused_as_prost_does(bytes in mangled_strategy()) {
        prop_assert_eq!(as_read_here(&bytes), as_prost_reads(&bytes));
    }

    #[test]
    fn random_bytes_are_accepted_or_refused_as_prost_does(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(as_read_here(&bytes), as_prost_reads(&bytes));
    }

    #[test]
    fn an_answer_is_written_byte_for_byte_as_prost_writes_it(
        overall in prop::bool::ANY,
        statuses in prop::collection::vec(
            (
                prop::bool::ANY,
                prop::option::of(("[a-z_]{0,12}", any::<u32>(), 0i32..5)),
                any::<u32>(),
                prop::option::of(prop_oneof![Just(0u64), 0u64..5_000, any::<u64>()]),
            ),
            0..4,
        ),
        headers in prop::collection::vec(("[a-z-]{0,12}", "[ -~]{0,40}"), 0..4),
    ) {
        let code = |over: bool| if over { Code::OverLimit } else { Code::Ok };
        let mine: Vec<DescriptorStatus<'_>> = statuses
            .iter()
            .map(|(over, limit, remaining, reset)| DescriptorStatus {
                code: code(*over),
                current_limit: limit.as_ref().map(|(name, requests_per_unit, unit)| CurrentLimit {
                    name,
                    requests_per_unit: *requests_per_unit,
                    unit: *unit,
                }),
                limit_remaining: *remaining,
                reset_ms: *reset,
            })
            .collect();
        let my_headers: Vec<Header<'_>> = headers
            .iter()
            .map(|(key, value)| Header { key, value })
            .collect();
        let mut written = Vec::new();
        write_response(&mut written, code(overall), &mine, &my_headers);
        prop_assert_eq!(written.len(), response_len(code(overall), &mine, &my_headers));

        let prost = RateLimitResponse {
            overall_code: code(overall) as i32,
            statuses: mine
                .iter()
                .map(|s| ProstStatus {
                    code: s.code as i32,
                    current_limit: s.current_limit.map(|l| RateLimit {
                        name: l.name.to_owned(),
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit,
                    }),
                    limit_remaining: s.limit_remaining,
                    duration_until_reset: s.reset_ms.map(|ms| ProstDuration {
                        seconds: i64::try_from(ms / 1000).expect("below 2^63"),
                        nanos: i32::try_from((ms % 1000) * 1_000_000).expect("below 10^9"),
                    }),
                    ..ProstStatus::default()
                })
                .collect(),
            response_headers_to_add: my_headers
                .iter()
                .map(|h| HeaderValue {
                    key: h.key.to_owned(),
                    value: h.value.to_owned(),
                    ..HeaderValue::default()
                })
                .collect(),
            ..RateLimitResponse::default()
        };
        prop_assert_eq!(written, prost.encode_to_vec());
    }
}

fn refused(bytes: &[u8]) -> String {
    read_request(bytes).expect_err("refused").to_string()
}

#[test]
fn a_repeated_limit_merges_and_a_repeated_domain_takes_the_last() {
    // domain "a", then a descriptor with limit {rpu 5} and limit {unit 3},
    // hits_addend {value 7} twice (the last wins), then domain "b".
    let bytes = [
        0x0a, 1, b'a', //
        0x12, 16, //
        0x12, 2, 0x08, 5, //
        0x12, 2, 0x10, 3, //
        0x1a, 2, 0x08, 7, //
        0x1a, 2, 0x08, 9, //
        0x0a, 1, b'b',
    ];
    let call = read_request(&bytes).expect("read");
    assert_eq!(call.domain, "b");
    assert_eq!(call.descriptor_count, 1);
    let d = &call.descriptors()[0];
    assert_eq!(
        d.limit,
        Some(Override {
            requests_per_unit: 5,
            unit: 3
        })
    );
    assert_eq!(d.hits_addend, Some(9));
    assert_eq!(as_read_here(&bytes), as_prost_reads(&bytes));
}

#[test]
fn unknown_fields_and_groups_are_skipped() {
    // A fixed32 (tag 7), a fixed64 (tag 8), a group (tag 9) holding a
    // nested group (tag 10), then the domain.
    let bytes = [
        0x3d, 1, 2, 3, 4, //
        0x41, 1, 2, 3, 4, 5, 6, 7, 8, //
        0x4b, 0x53, 0x08, 1, 0x54, 0x4c, //
        0x0a, 1, b'x',
    ];
    assert_eq!(read_request(&bytes).expect("read").domain, "x");
    assert_eq!(as_read_here(&bytes), as_prost_reads(&bytes));
}

#[test]
fn malformed_messages_are_refused_with_where_and_what() {
    // A descriptor's entry value that is not UTF-8.
    let bad_value = [0x0a, 1, b'd', 0x12, 6, 0x0a, 4, 0x12, 2, 0xff, 0xfe];
    assert_eq!(
        refused(&bad_value),
        "descriptors[0].entries[0].value: a string is not UTF-8"
    );
    // The domain's length runs past the end.
    assert_eq!(
        refused(&[0x0a, 9, b'd']),
        "domain: the bytes end inside a field"
    );
    // hits_addend sent as a string.
    assert_eq!(
        refused(&[0x1a, 1, b'1']),
        "hits_addend: a field has the wrong wire type"
    );
    // A group's end with no start.
    assert_eq!(refused(&[0x4c]), "a group is malformed");
    // Tag 0.
    assert_eq!(refused(&[0x00, 0x01]), "a field key is malformed");
    // An eleven-byte varint.
    assert_eq!(
        refused(&[
            0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ]),
        "hits_addend: a varint is malformed"
    );
    for bytes in [&bad_value[..], &[0x0a, 9, b'd'], &[0x4c]] {
        assert!(RateLimitRequest::decode(bytes).is_err());
    }
}

#[test]
fn nesting_deeper_than_prosts_limit_is_refused_as_prost_refuses_it() {
    // Groups nested 99 and 100 deep inside the request.
    let nested = |depth: usize| {
        let mut bytes = vec![0x4b; depth];
        bytes.extend(std::iter::repeat_n(0x4c, depth));
        bytes
    };
    assert!(read_request(&nested(99)).is_ok());
    assert!(RateLimitRequest::decode(&nested(99)[..]).is_ok());
    assert_eq!(refused(&nested(101)), "fields are nested too deeply");
    assert_eq!(as_read_here(&nested(100)), as_prost_reads(&nested(100)));
    assert_eq!(as_read_here(&nested(101)), as_prost_reads(&nested(101)));
}

#[test]
fn descriptors_and_entries_beyond_the_bounds_are_counted_not_kept() {
    let many = RateLimitRequest {
        domain: "d".into(),
        descriptors: (0..MAX_DESCRIPTORS + 3)
            .map(|_| RateLimitDescriptor {
                entries: (0..MAX_ENTRIES + 2)
                    .map(|i| ProstEntry {
                        key: format!("k{i}"),
                        value: "v".into(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
    .encode_to_vec();
    let call = read_request(&many).expect("read");
    assert_eq!(call.descriptor_count, MAX_DESCRIPTORS + 3);
    assert_eq!(call.descriptors().len(), MAX_DESCRIPTORS);
    let d = &call.descriptors()[0];
    assert_eq!(d.entry_count, MAX_ENTRIES + 2);
    assert_eq!(call.entries(d).len(), MAX_ENTRIES);
    assert_eq!(call.entries.len(), MAX_DESCRIPTORS * MAX_ENTRIES);
}
