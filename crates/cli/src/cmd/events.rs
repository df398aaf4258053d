//! `quorum events NAME`: a control plane's history as the store keeps it. Each step
//! quorum took or was refused, when (UTC), and which controller replica wrote it, so
//! that after a failover one can tell what the old leader did and what the new one did.

use anyhow::Result;
use quorum_ops::status::columns;
use quorum_store::{Event, Store};
use std::time::Duration;

/// Events read per store call while paging through the history.
const PAGE: u32 = 1_000;
/// How often `--follow` looks for new events.
const FOLLOW_POLL_MS: u64 = 500;

/// How the history is printed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    /// One JSON array; with `--follow`, one object per line.
    Json,
    Yaml,
}

/// Pages read at most: the stores keep 10,000 events per control plane (the etcd store
/// may briefly hold 256 more per replica before it prunes), well inside this.
const MAX_PAGES: u32 = 20;

/// The newest `last` events of `name` (every event kept when `last` is 0), oldest first.
fn newest(store: &Store, name: &str, last: u32) -> Result<Vec<Event>> {
    let mut all: Vec<Event> = Vec::new();
    let mut after = 0;
    for _ in 0..MAX_PAGES {
        let page = store.events_after(name, after, PAGE)?;
        let Some(tail) = page.last() else { break };
        after = tail.id;
        let full = page.len() == PAGE as usize;
        all.extend(page);
        if last > 0 && all.len() > 2 * last as usize {
            // Keep memory bounded by the request, not the history.
            all.drain(..all.len() - last as usize);
        }
        if !full {
            break;
        }
    }
    if last > 0 && all.len() > last as usize {
        all.drain(..all.len() - last as usize);
    }
    Ok(all)
}

/// Prints the history and, with `follow`, every new event until the control plane is
/// deleted or the process is interrupted (Ctrl-C ends it; nothing is left to clean up).
/// The history outlives the control plane: after a deletion it still shows what was
/// done. `--follow` with YAML is refused by the command line before this runs.
pub async fn run(store: &Store, name: &str, last: u32, follow: bool, format: Format) -> Result<()> {
    let exists = store.control_plane(name)?.is_some();
    let events = newest(store, name, last)?;
    if !exists && events.is_empty() {
        // Neither a control plane nor a history: the store's own "does not exist".
        store.get_control_plane(name)?;
    }
    let mut after = events.last().map_or(0, |e| e.id);
    let mut text = match (format, follow) {
        (Format::Table, false) if events.is_empty() => {
            format!("{name}: no events yet (the controller records each step it takes)\n")
        }
        (Format::Table, false) => table(&events, true),
        (Format::Table, true) => fixed_lines(&events, true),
        (Format::Json, false) => format!("{}\n", serde_json::to_string_pretty(&events)?),
        (Format::Json, true) => json_lines(&events)?,
        (Format::Yaml, _) => serde_yaml::to_string(&events)?,
    };
    if !exists && format == Format::Table {
        text.push_str(&format!(
            "{name} no longer exists: these are the steps recorded before its deletion\n"
        ));
    }
    if !emit(&text)? || !exists || !follow {
        return Ok(());
    }
    let mut gone = false;
    loop {
        tokio::time::sleep(Duration::from_millis(FOLLOW_POLL_MS)).await;
        // Looked at before reading: the steps of a deletion are recorded before the
        // record goes, except the last one, hence one more round once it is gone.
        let last_round = gone;
        gone = store.control_plane(name)?.is_none();
        for _ in 0..MAX_PAGES {
            let new = store.events_after(name, after, PAGE)?;
            let Some(tail) = new.last() else { break };
            after = tail.id;
            let text = match format {
                Format::Table => fixed_lines(&new, false),
                _ => json_lines(&new)?,
            };
            if !emit(&text)? {
                return Ok(());
            }
            if new.len() < PAGE as usize {
                break;
            }
        }
        if last_round {
            if format == Format::Table {
                emit(&format!("{name}: deleted\n"))?;
            }
            return Ok(());
        }
    }
}

/// Writes `text` to standard output; `false` when the reader went away (`| head`),
/// which ends the command quietly instead of with a panic.
fn emit(text: &str) -> Result<bool> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// One JSON object per line.
fn json_lines(events: &[Event]) -> Result<String> {
    let mut out = String::new();
    for e in events {
        out.push_str(&serde_json::to_string(e)?);
        out.push('\n');
    }
    Ok(out)
}

const HEADER: [&str; 7] = [
    "TIME (UTC)",
    "BY",
    "RESULT",
    "STEP",
    "MACHINE",
    "TOOK",
    "MESSAGE",
];
/// Column widths for `--follow`, where later lines cannot widen earlier ones: wide
/// enough for a timestamp, a host-pid identity, each outcome and step kind.
const FOLLOW_WIDTHS: [usize; 6] = [23, 20, 7, 20, 12, 7];

/// The events as aligned columns; the message comes last, unpadded.
fn table(events: &[Event], header: bool) -> String {
    columns(&rows(events, header))
}

/// The events in fixed-width columns (a longer cell widens its own line only), so that
/// lines printed as they come stay aligned with the ones before.
fn fixed_lines(events: &[Event], header: bool) -> String {
    let mut out = String::new();
    for r in rows(events, header) {
        for (i, cell) in r.iter().enumerate() {
            match FOLLOW_WIDTHS.get(i) {
                Some(w) => out.push_str(&format!("{cell:<w$}  ")),
                None => out.push_str(cell),
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// The header (when asked for), then one row of cells per event, in `HEADER` order.
fn rows(events: &[Event], header: bool) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(events.len() + 1);
    if header {
        rows.push(HEADER.map(String::from).to_vec());
    }
    for e in events {
        rows.push(vec![
            quorum_pki::format_unix_ms(e.at_ms),
            e.by.clone().unwrap_or_else(|| "-".into()),
            e.outcome.to_string(),
            e.kind.to_string(),
            e.machine.clone().unwrap_or_else(|| "-".into()),
            e.took_ms.map_or_else(|| "-".into(), |ms| format!("{ms}ms")),
            e.message.clone(),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_store::{EventKind, StepOutcome};

    fn ev(id: i64, by: Option<&str>, kind: &str, ok: bool) -> Event {
        let kind = EventKind::parse(kind);
        let outcome = StepOutcome::implied(&kind, ok);
        Event {
            id,
            control_plane: "a".into(),
            at_ms: 1_796_278_292_466,
            machine: Some("a-2".into()),
            message: format!("{kind} a-2"),
            kind,
            ok,
            outcome,
            waited_ms: None,
            took_ms: Some(19),
            by: by.map(str::to_string),
        }
    }

    #[test]
    fn the_table_names_the_writer_and_the_outcome() {
        let t = table(
            &[
                ev(1, Some("r1"), "remove-member", true),
                ev(2, None, "refused", false),
                ev(3, Some("r2"), "promote", false),
            ],
            true,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("TIME (UTC)"), "{t}");
        assert!(
            lines[1].contains(" r1 ") && lines[1].contains(" ok "),
            "{t}"
        );
        assert!(lines[1].ends_with("remove-member a-2"), "{t}");
        assert!(
            lines[2].contains(" - ") && lines[2].contains(" refused "),
            "{t}"
        );
        assert!(
            lines[3].contains(" r2 ") && lines[3].contains(" failed "),
            "{t}"
        );
        assert!(!table(&[ev(1, None, "x", true)], false).contains("TIME"));
    }

    /// Walkthrough item 7: a refused step shows its own kind as STEP and `refused` as
    /// RESULT (it used to show `refused` for both, losing the step).
    #[test]
    fn a_refused_step_keeps_its_kind() {
        let refused = Event {
            outcome: StepOutcome::Refused,
            ok: false,
            message:
                "add a-2 as a learner: etcd accepts one membership change per ~5 s; retrying (...)"
                    .into(),
            ..ev(1, Some("r1"), "add-learner", true)
        };
        let t = table(&[refused], true);
        let cells = |l: &str| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let lines: Vec<&str> = t.lines().collect();
        let (head, row) = (cells(lines[0]), cells(lines[1]));
        let at = |name: &str| head.iter().position(|h| h == name).unwrap();
        assert_eq!(row[at("STEP")], "add-learner", "{t}");
        assert_eq!(row[at("RESULT")], "refused", "{t}");
        assert!(
            row.last()
                .unwrap()
                .contains("one membership change per ~5 s"),
            "{t}"
        );
    }

    #[test]
    fn followed_lines_keep_their_columns_from_batch_to_batch() {
        let first = fixed_lines(&[ev(1, Some("r1"), "promote", true)], true);
        let later = fixed_lines(&[ev(2, Some("host-1-4242"), "remove-member", false)], false);
        let at = |l: &str, m: &str| l.find(m).unwrap();
        let (a, b) = (first.lines().nth(1).unwrap(), later.lines().next().unwrap());
        assert_eq!(
            at(a, "promote a-2"),
            at(b, "remove-member a-2"),
            "{first}{later}"
        );
        assert_eq!(
            at(first.lines().next().unwrap(), "MESSAGE"),
            at(a, "promote a-2")
        );
        assert!(!later.lines().any(|l| l.ends_with(' ')), "{later:?}");
    }
}
