//! The little HTTP the exporter speaks, as pure functions: the head of a request in, what to
//! answer out. Anything but `GET /metrics` or `HEAD /metrics` (a query string is ignored)
//! gets a 4xx status and the connection closes; nothing a peer sends can do more.

/// The request head, as far as the exporter cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The method (`GET`, `HEAD`, ...).
    pub method: String,
    /// The request target, without its query string.
    pub path: String,
}

/// Why a request head was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Longer than the limit before its end (`\r\n\r\n`).
    #[error("request head over {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Not an HTTP/1.x request head.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// Parse the head at the start of `buf`: `Ok(None)` while it is incomplete (read more),
/// an error when it is over `limit` bytes or malformed.
pub fn parse_head(buf: &[u8], limit: usize) -> Result<Option<RequestHead>, HeadError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= limit {
            Err(HeadError::TooLarge { limit })
        } else {
            Ok(None)
        };
    };
    if end + 4 > limit {
        return Err(HeadError::TooLarge { limit });
    }
    let head = std::str::from_utf8(&buf[..end])
        .map_err(|_| HeadError::Malformed("the head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed(
            "the request line is not METHOD TARGET VERSION",
        ));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HeadError::Malformed("bad method"));
    }
    if !target.starts_with('/') {
        return Err(HeadError::Malformed("the target is not a path"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HeadError::Malformed("not HTTP/1.0 or HTTP/1.1"));
    }
    for line in lines {
        match line.split_once(':') {
            Some((name, _))
                if !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') => {}
            _ => return Err(HeadError::Malformed("bad header line")),
        }
    }
    let path = target.split('?').next().unwrap_or(target);
    Ok(Some(RequestHead {
        method: method.to_string(),
        path: path.to_string(),
    }))
}

/// What to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The metrics (`head_only`: without the body, for `HEAD`).
    Metrics {
        /// `HEAD`: the headers only.
        head_only: bool,
    },
    /// 404: another path.
    NotFound,
    /// 405: another method.
    MethodNotAllowed,
}

/// Where a parsed request goes; `metrics_path` is usually `/metrics`.
pub fn route(head: &RequestHead, metrics_path: &str) -> Route {
    if head.path != metrics_path {
        return Route::NotFound;
    }
    match head.method.as_str() {
        "GET" => Route::Metrics { head_only: false },
        "HEAD" => Route::Metrics { head_only: true },
        _ => Route::MethodNotAllowed,
    }
}

/// The content type of the OpenMetrics text format that `prometheus-client` encodes
/// (Prometheus asks for it first in its `Accept` header).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A complete response (the connection closes after it).
pub fn response(status: u16, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let retry = if status == 503 {
        "Retry-After: 1\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {allow}{retry}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// A short plain-text response for an error status.
pub fn error_response(status: u16, message: &str) -> Vec<u8> {
    response(
        status,
        "text/plain; charset=utf-8",
        format!("{message}\n").as_bytes(),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_is_parsed_and_routed_to_the_metrics() {
        let req = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
        let h = parse_head(req, 8192).expect("valid").expect("complete");
        assert_eq!(h.path, "/metrics");
        assert_eq!(route(&h, "/metrics"), Route::Metrics { head_only: false });
        let h = parse_head(b"HEAD /metrics HTTP/1.0\r\n\r\n", 8192)
            .expect("valid")
            .expect("complete");
        assert_eq!(route(&h, "/metrics"), Route::Metrics { head_only: true });
    }

    #[test]
    fn incomplete_heads_wait_and_long_ones_are_refused() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost:", 8192),
            Ok(None)
        );
        let long = vec![b'a'; 100];
        assert_eq!(
            parse_head(&long, 100),
            Err(HeadError::TooLarge { limit: 100 })
        );
        let mut req = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        req.extend(vec![b'a'; 200]);
        req.extend(b"\r\n\r\n");
        assert!(matches!(
            parse_head(&req, 100),
            Err(HeadError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_is_malformed_and_other_requests_are_not_the_metrics() {
        for bad in [
            &b"\x00\x01\x02\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/2\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(bad, 8192), Err(HeadError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let h = |s: &str| {
            parse_head(s.as_bytes(), 8192)
                .expect("valid")
                .expect("complete")
        };
        assert_eq!(
            route(&h("GET / HTTP/1.1\r\n\r\n"), "/metrics"),
            Route::NotFound
        );
        assert_eq!(
            route(&h("POST /metrics HTTP/1.1\r\n\r\n"), "/metrics"),
            Route::MethodNotAllowed
        );
    }

    #[test]
    fn responses_say_their_length_and_close() {
        let r = String::from_utf8(response(200, CONTENT_TYPE, b"x 1\n", false)).expect("utf8");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Length: 4\r\n"), "{r}");
        assert!(r.contains("Connection: close\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nx 1\n"), "{r}");
        let head = String::from_utf8(response(200, CONTENT_TYPE, b"x 1\n", true)).expect("utf8");
        assert!(head.ends_with("\r\n\r\n") && head.contains("Content-Length: 4"));
        let e = String::from_utf8(error_response(405, "only GET")).expect("utf8");
        assert!(e.contains("Allow: GET, HEAD\r\n"), "{e}");
    }
}
