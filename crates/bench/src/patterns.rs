//! The two client patterns of control planes, run together beside any operation: a
//! watcher following a prefix that a writer fills (`watchers`), and a lease holder
//! that sticks to the addresses it was given (`sticky`). `Patterns::finish` gives the
//! figures every operation is judged by: events missed, duplicated or out of order,
//! streams broken and the longest resume, leases expired, the longest keep-alive gap,
//! and times stranded.

use crate::sticky::{Sticky, StickyReport};
use crate::watchers::{Verdict, WatchReport, Watcher, Writer};
use etcd_client::ConnectOptions;
use quorum_etcd::ClientTls;
use serde::Serialize;
use std::time::Duration;

/// How long the watcher may take to see the last acknowledged write once the
/// operation is over.
const CATCH_UP_S: u64 = 30;

/// What the two patterns saw during one operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatternFigures {
    /// Put events the watcher received, and the acknowledged writes behind them.
    pub events: u64,
    pub acknowledged: u64,
    pub missed: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    /// The watcher never caught up with the last acknowledged write.
    pub behind: bool,
    pub streams_broken: u32,
    pub longest_resume_ms: u64,
    pub compacted: u32,
    pub leases_expired: u32,
    pub longest_keepalive_gap_ms: u64,
    pub stranded: u32,
}

impl PatternFigures {
    /// Whether nothing a client depends on went wrong.
    pub fn clean(&self) -> bool {
        self.missed == 0
            && self.duplicated == 0
            && self.out_of_order == 0
            && !self.behind
            && self.leases_expired == 0
            && self.stranded == 0
    }

    fn of(acked: &[i64], behind: bool, w: WatchReport, v: Verdict, l: StickyReport) -> Self {
        PatternFigures {
            events: w.events,
            acknowledged: acked.len() as u64,
            missed: v.missed,
            duplicated: v.duplicated,
            out_of_order: v.out_of_order,
            behind,
            streams_broken: w.broken,
            longest_resume_ms: w.longest_resume_ms,
            compacted: w.compacted,
            leases_expired: l.leases_expired,
            longest_keepalive_gap_ms: l.longest_keepalive_gap_ms,
            stranded: l.stranded,
        }
    }
}

/// The etcd client options for `tls` (none: plain HTTP), with short connect deadlines.
pub fn connect_options(tls: Option<&ClientTls>) -> ConnectOptions {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    match tls {
        None => opts,
        Some(t) => opts.with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&t.ca_pem))
                .identity(etcd_client::Identity::from_pem(&t.cert_pem, &t.key_pem)),
        ),
    }
}

/// A writer, a watcher and a lease holder on one list of addresses.
pub struct Patterns {
    writer: Writer,
    watcher: Watcher,
    sticky: Sticky,
}

impl Patterns {
    /// Starts them on `urls` (the addresses a client was given), on the current tokio
    /// runtime; `tag` keeps the keys of several at once apart.
    pub fn start(urls: &[String], opts: &ConnectOptions, tag: &str) -> Patterns {
        let prefix = format!("patterns/{tag}/");
        Patterns {
            writer: Writer::start(urls.to_vec(), opts.clone(), prefix.clone()),
            watcher: Watcher::start(urls.to_vec(), opts.clone(), prefix, 1),
            sticky: Sticky::start(urls.to_vec(), opts.clone(), format!("leader/{tag}")),
        }
    }

    /// Stops the writer, waits (bounded) for the watcher to see its last write, stops
    /// the others; the figures.
    pub async fn finish(self) -> PatternFigures {
        let acked = self.writer.stop().await;
        let last = acked.last().copied().unwrap_or(0);
        let caught_up = self
            .watcher
            .wait_seen(last, Duration::from_secs(CATCH_UP_S))
            .await;
        let (w, v) = self.watcher.stop(&acked).await;
        let l = self.sticky.stop().await;
        PatternFigures::of(&acked, !caught_up, w, v, l)
    }
}
