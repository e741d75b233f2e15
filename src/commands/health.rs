//! `health`: GET `/healthz` of a running worker and exit 0 (healthy) or 1,
//! so the slim image needs no curl for its container healthcheck.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::exit;
use crate::config::Settings;

/// The whole check (connect, request, answer) must fit in this.
const TIMEOUT: Duration = Duration::from_secs(5);

pub async fn health(settings: &Settings, url: Option<String>) -> anyhow::Result<ExitCode> {
    let url = match url {
        Some(url) => url,
        None => match settings.http.listen {
            Some(addr) => format!("http://{}/healthz", reachable(addr)),
            None => {
                outln!(
                    "unhealthy: http.listen is off, so there is no /healthz to ask (set http.listen or pass --url)"
                );
                return Ok(ExitCode::from(exit::FAILURE));
            }
        },
    };
    let (status, body) = match tokio::time::timeout(TIMEOUT, get(&url)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            outln!("unhealthy: {url}: {e:#}");
            return Ok(ExitCode::from(exit::FAILURE));
        }
        Err(_) => {
            outln!(
                "unhealthy: {url}: no answer within {}",
                humantime::format_duration(TIMEOUT)
            );
            return Ok(ExitCode::from(exit::FAILURE));
        }
    };
    if status == 200 {
        outln!("healthy: {body}");
        Ok(ExitCode::SUCCESS)
    } else {
        outln!("unhealthy: {status} {body}");
        Ok(ExitCode::from(exit::FAILURE))
    }
}

/// A listener on every interface is asked on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

async fn get(url: &str) -> anyhow::Result<(u16, String)> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("not a URL: {url}"))?;
    if uri.scheme_str() != Some("http") {
        bail!("only http:// URLs are supported");
    }
    let host = uri.host().context("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .context("cannot connect")?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake failed")?;
    tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .body(Empty::<Bytes>::new())
        .context("cannot build the request")?;
    let response = sender
        .send_request(request)
        .await
        .context("request failed")?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .context("cannot read the answer")?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).trim().to_owned()))
}
