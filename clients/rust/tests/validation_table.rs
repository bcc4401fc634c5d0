//! The shared validation table (tests/data/validation_cases.json, also run by the Python
//! client and the Python validator's unit tests) through the Rust client against a live
//! server configured as the table says: the local verdict (`Client::validate`, or
//! `EnqueueRequest::new` refusing a name) and the server's own verdict (a client with
//! `validate_locally(false)`) both equal the table's — code, field, limit and actual.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sepp_rs::{Client, CustomValue, EnqueueRequest, Error, Payload, Priority, Rejection};

type Verdict = Option<(String, String, Option<i64>, Option<i64>)>;

fn table() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/validation_cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(o) => o["repeat"].as_str().unwrap().repeat(o["times"].as_u64().unwrap() as usize),
        other => panic!("not a string of the table: {other}"),
    }
}

fn custom_value(value: &Value) -> CustomValue {
    match value {
        Value::String(s) => CustomValue::String(s.clone()),
        Value::Bool(b) => CustomValue::Bool(*b),
        Value::Number(n) => CustomValue::Int(n.as_i64().unwrap()),
        Value::Object(o) => CustomValue::Float(match &o["float"] {
            Value::String(s) => match s.as_str() {
                "nan" => f64::NAN,
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                other => panic!("float {other}"),
            },
            n => n.as_f64().unwrap(),
        }),
        other => panic!("not a custom value of the table: {other}"),
    }
}

fn expected(case: &Value) -> Verdict {
    let e = case["expect"].as_array()?;
    Some((e[0].as_str().unwrap().to_string(), e[1].as_str().unwrap().to_string(), e[2].as_i64(), e[3].as_i64()))
}

fn key(rejection: Option<&Rejection>) -> Verdict {
    rejection.map(|r| (r.code.reason().to_string(), r.field.clone(), r.limit, r.actual))
}

/// `base` moved by `nanos` (either sign; centuries too).
fn offset(base: SystemTime, nanos: i128) -> SystemTime {
    let size = nanos.unsigned_abs();
    let step = Duration::new((size / 1_000_000_000) as u64, (size % 1_000_000_000) as u32);
    if nanos >= 0 { base + step } else { base - step }
}

/// The case as the Rust client's request, or the rejection `EnqueueRequest::new` gives it.
fn request(case: &Value) -> Result<EnqueueRequest, Rejection> {
    let r = &case["request"];
    let mut req = EnqueueRequest::new(text(&r["queue"]), text(&r["job_type"]))?;
    if r.get("data_len").is_some() || r.get("encoding").is_some() {
        let len = r.get("data_len").and_then(Value::as_u64).unwrap_or(0) as usize;
        req = req.with_payload(Payload::new(vec![b'x'; len], r.get("encoding").map(text).unwrap_or_default()));
    }
    if let Some(p) = r.get("priority") {
        req = req.with_priority(Priority::new(p.as_u64().unwrap() as u8).unwrap());
    }
    if let Some(m) = r.get("max_attempts") {
        req = req.with_max_attempts(m.as_i64().unwrap() as i32);
    }
    for pair in r.get("custom").and_then(Value::as_array).into_iter().flatten() {
        req = req.with_custom_entry(text(&pair[0]), custom_value(&pair[1]));
    }
    if let Some(trace) = r.get("trace").and_then(Value::as_array) {
        req = req.with_trace_context(trace.iter().map(|pair| (text(&pair[0]), text(&pair[1]))));
    }
    if let Some(k) = r.get("idempotency_key") {
        req = req.with_idempotency_key(text(k));
    }
    if let Some(ns) = r.get("scheduled_in_ns") {
        req = req.with_scheduled_at(offset(SystemTime::now(), ns.as_i64().unwrap() as i128));
    }
    if let Some(at) = r.get("scheduled_at") {
        let ns = at["seconds"].as_i64().unwrap() as i128 * 1_000_000_000 + at["nanos"].as_i64().unwrap() as i128;
        req = req.with_scheduled_at(offset(UNIX_EPOCH, ns));
    }
    Ok(req)
}

fn runs_here(case: &Value) -> bool {
    let not_in = &case["not_in"];
    case.get("live").and_then(Value::as_bool).unwrap_or(true) && not_in.get("client").is_none() && not_in.get("rust").is_none()
}

#[tokio::test]
async fn local_and_server_verdicts_equal_the_shared_table() {
    let table = table();
    let local = Client::connect(common::table_target()).await.unwrap();
    let remote = Client::builder(common::table_target()).validate_locally(false).connect().await.unwrap();
    let mut mismatches = Vec::new();
    let (mut ran, mut sent) = (0, 0);
    for case in table["cases"].as_array().unwrap().iter().filter(|c| runs_here(c)) {
        let id = case["id"].as_str().unwrap();
        let want = expected(case);
        ran += 1;
        let req = match request(case) {
            Ok(req) => req,
            Err(refused) => {
                // Refused by `new` (a name rule that needs no server limit): the local verdict.
                if key(Some(&refused)) != want {
                    mismatches.push(format!("{id}: new() gave {:?}, the table says {want:?}", key(Some(&refused))));
                }
                continue;
            }
        };
        let mine = local.validate(&req).await.unwrap();
        if key(mine.as_ref()) != want {
            mismatches.push(format!("{id}: local verdict {:?}, the table says {want:?}", key(mine.as_ref())));
        }
        sent += 1;
        let theirs = match remote.enqueue(req).await {
            Ok(_) => None,
            Err(Error::Rejected(r)) => Some(r),
            Err(other) => panic!("{id}: {other}"),
        };
        if key(theirs.as_ref()) != want {
            mismatches.push(format!("{id}: server verdict {:?}, the table says {want:?}", key(theirs.as_ref())));
        }
    }
    assert!(mismatches.is_empty(), "{} of {ran} cases disagree:\n{}", mismatches.len(), mismatches.join("\n"));
    assert!(ran >= 60 && sent >= 50, "ran {ran}, sent {sent}");
}
