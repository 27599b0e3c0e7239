//! [`WasiPlatform`]: the [`Platform`] over wasi:http 0.2, wasi:io/poll and wasi:clocks.
//!
//! Only meaningful inside a component (the `wasi` crate's imports are unreachable natively).

use std::time::Duration;

use wasi::clocks::{monotonic_clock, wall_clock};
use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingResponse, Method, OutgoingBody,
    OutgoingRequest, RequestOptions, Scheme as WasiScheme, http_error_code,
};
use wasi::io::poll::{Pollable, poll};
use wasi::io::streams::StreamError;

use super::{HttpError, MAX_RESPONSE_BODY, Platform, Request, Response, Scheme, Target};

/// The most bytes `blocking-write-and-flush` accepts per call.
const WRITE_CHUNK: usize = 4096;

/// The real platform: wasi:http's outgoing handler and the WASI clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct WasiPlatform;

/// Where one request of a batch stands.
enum Slot {
    /// Sent; the response head has not arrived yet.
    Waiting(FutureIncomingResponse),
    /// The response head arrived; the body is still to be read.
    Head(IncomingResponse),
    /// Finished, with a response or an error.
    Done(Result<Response, HttpError>),
}

impl Platform for WasiPlatform {
    fn send_all(
        &mut self,
        requests: Vec<Request>,
        timeout: Duration,
    ) -> Vec<Result<Response, HttpError>> {
        let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let deadline = monotonic_clock::now().saturating_add(timeout_ns);
        let mut slots: Vec<Slot> = requests
            .into_iter()
            .map(|request| match start(request, timeout_ns) {
                Ok(future) => Slot::Waiting(future),
                Err(error) => Slot::Done(Err(error)),
            })
            .collect();
        await_heads(&mut slots, deadline);
        slots
            .into_iter()
            .map(|slot| match slot {
                Slot::Head(response) => read_response(response, deadline),
                Slot::Done(result) => result,
                Slot::Waiting(_) => Err(HttpError::Timeout),
            })
            .collect()
    }

    fn unix_time_secs(&self) -> u64 {
        wall_clock::now().seconds
    }
}

/// Starts `request`: hands it to the outgoing handler, then writes and finishes its body.
fn start(request: Request, timeout_ns: u64) -> Result<FutureIncomingResponse, HttpError> {
    let target = Target::parse(&request.url).map_err(HttpError::Transport)?;
    let mut entries: Vec<(String, Vec<u8>)> = request
        .headers
        .into_iter()
        .map(|(name, value)| (name, value.into_bytes()))
        .collect();
    entries.push((
        "content-length".to_string(),
        request.body.len().to_string().into_bytes(),
    ));
    let headers = Fields::from_list(&entries)
        .map_err(|error| HttpError::Transport(format!("invalid request header: {error:?}")))?;
    let outgoing = OutgoingRequest::new(headers);
    let scheme = match target.scheme {
        Scheme::Http => WasiScheme::Http,
        Scheme::Https => WasiScheme::Https,
    };
    let refused =
        |what: &str| HttpError::Transport(format!("the host refused the request's {what}"));
    outgoing
        .set_method(&Method::Post)
        .map_err(|()| refused("method"))?;
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| refused("scheme"))?;
    outgoing
        .set_authority(Some(&target.authority))
        .map_err(|()| refused("authority"))?;
    outgoing
        .set_path_with_query(Some(&target.path_with_query))
        .map_err(|()| refused("path"))?;
    let body = outgoing.body().map_err(|()| refused("body"))?;

    let options = RequestOptions::new();
    // A host that does not support a timeout refuses it; the overall deadline still applies.
    let _ = options.set_connect_timeout(Some(timeout_ns));
    let _ = options.set_first_byte_timeout(Some(timeout_ns));
    let _ = options.set_between_bytes_timeout(Some(timeout_ns));
    let future =
        outgoing_handler::handle(outgoing, Some(options)).map_err(|code| from_code(&code))?;

    let sent = write_body(&body, &request.body)
        .and_then(|()| OutgoingBody::finish(body, None).map_err(|code| from_code(&code)));
    match sent {
        Ok(()) => Ok(future),
        // A request the host refused (allowlist) closes its body stream; the reason is in the
        // response future, so report that rather than "stream closed".
        Err(write_error) => Err(failed_response(&future).unwrap_or(write_error)),
    }
}

/// The error a request's response future resolved to, once it has resolved (a body write that
/// failed means the request already ended).
fn failed_response(future: &FutureIncomingResponse) -> Option<HttpError> {
    let pollable = future.subscribe();
    pollable.block();
    drop(pollable);
    match future.get() {
        Some(Ok(Err(code))) => Some(from_code(&code)),
        _ => None,
    }
}

/// Writes `bytes` into the request body.
fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
    let stream = body
        .write()
        .map_err(|()| HttpError::Transport("the request body stream was refused".to_string()))?;
    for chunk in bytes.chunks(WRITE_CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(stream_error)?;
    }
    Ok(())
}

/// Waits until every `Waiting` slot has its response head or the deadline passes.
fn await_heads(slots: &mut [Slot], deadline: u64) {
    loop {
        let (waiting, mut pollables): (Vec<usize>, Vec<Pollable>) = slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| match slot {
                Slot::Waiting(future) => Some((index, future.subscribe())),
                _ => None,
            })
            .unzip();
        if waiting.is_empty() {
            return;
        }
        pollables.push(monotonic_clock::subscribe_instant(deadline));
        let ready = poll(&pollables.iter().collect::<Vec<&Pollable>>());
        // The pollables are children of the futures: drop them before any future is replaced.
        drop(pollables);
        let mut deadline_passed = false;
        for &position in &ready {
            let Some(&index) = waiting.get(position as usize) else {
                deadline_passed = true; // the last pollable is the deadline
                continue;
            };
            let Slot::Waiting(future) = &slots[index] else {
                continue;
            };
            let outcome = match future.get() {
                None => continue,
                Some(Ok(Ok(response))) => Slot::Head(response),
                Some(Ok(Err(code))) => Slot::Done(Err(from_code(&code))),
                Some(Err(())) => Slot::Done(Err(HttpError::Transport(
                    "response already taken".to_string(),
                ))),
            };
            slots[index] = outcome;
        }
        if deadline_passed {
            return; // what is still waiting times out
        }
    }
}

/// Reads status, headers and body of `response`, waiting for the body until `deadline`.
fn read_response(response: IncomingResponse, deadline: u64) -> Result<Response, HttpError> {
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .filter_map(|(name, value)| String::from_utf8(value).ok().map(|value| (name, value)))
        .collect();
    let incoming = response
        .consume()
        .map_err(|()| HttpError::Transport("the response body was already taken".to_string()))?;
    let mut body = Vec::new();
    {
        let stream = incoming.stream().map_err(|()| {
            HttpError::Transport("the response body stream was refused".to_string())
        })?;
        loop {
            match stream.read(MAX_RESPONSE_BODY as u64) {
                Ok(bytes) if bytes.is_empty() => {
                    let readable = stream.subscribe();
                    let timer = monotonic_clock::subscribe_instant(deadline);
                    let ready = poll(&[&readable, &timer]);
                    if !ready.contains(&0) {
                        return Err(HttpError::Timeout);
                    }
                }
                Ok(bytes) => {
                    let room = MAX_RESPONSE_BODY.saturating_sub(body.len());
                    body.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
                Err(StreamError::Closed) => break,
                Err(error) => return Err(stream_error(error)),
            }
        }
        // The stream (a child of the body) drops here, before the body.
    }
    drop(incoming);
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// A stream failure as a transport error.
fn stream_error(error: StreamError) -> HttpError {
    match error {
        StreamError::Closed => HttpError::Transport("stream closed".to_string()),
        StreamError::LastOperationFailed(error) => HttpError::Transport(
            http_error_code(&error).map_or_else(|| error.to_debug_string(), |code| describe(&code)),
        ),
    }
}

/// A wasi:http error code as an [`HttpError`]: a refusal by the host's allowlist is
/// [`HttpError::Denied`], anything else a transport error.
fn from_code(code: &ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied,
        other => HttpError::Transport(describe(other)),
    }
}

/// A wasi:http error code in words; the ones outboxd's host limits produce name the limit.
fn describe(code: &ErrorCode) -> String {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied.to_string(),
        ErrorCode::HttpResponseBodySize(size) => format!(
            "response body too large ({}): over the sink's limits.max_response_size",
            size.map_or_else(|| "size unknown".to_string(), |n| format!("{n} bytes"))
        ),
        ErrorCode::ConnectionTimeout => "connect timed out".to_string(),
        ErrorCode::ConnectionReadTimeout => "timed out waiting for the response".to_string(),
        ErrorCode::ConnectionRefused => "connection refused".to_string(),
        other => format!("{other:?}"),
    }
}
