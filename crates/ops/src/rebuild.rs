//! `quorum restore` and `quorum recover`: the plan a person reads before a rebuild,
//! what it loses, and the confirmed record the controller then performs
//! (`quorum_core::rebuild`). Nothing here touches a member: recording the rebuild is
//! the whole of it, so a crash of the command leaves either nothing or the record.

use crate::{status, Ctx};
use anyhow::{bail, Result};
use quorum_core::{
    ControlPlane, Machine, Observation, Rebuild, RebuildPhase, RebuildSource, SnapshotRecord,
};
use std::fmt::Write as _;

/// What a person asked to rebuild from.
#[derive(Clone, Debug)]
pub enum From {
    /// A surviving member, by machine name.
    Member(String),
    /// A recorded snapshot: its id, or `newest`.
    Snapshot(String),
}

/// A rebuild ready to be confirmed: the record to write and the words that explain it.
#[derive(Clone, Debug)]
pub struct Plan {
    pub rebuild: Rebuild,
    pub text: String,
}

/// Works out the rebuild of `cp` from `from` and says what it does and loses, or
/// refuses with the reason (a rebuild under way, a member recovery while a leader
/// answers, a snapshot whose test restore failed, a survivor without data).
pub async fn plan(
    ctx: &Ctx,
    cp: &ControlPlane,
    from: &From,
    now_unix_s: i64,
    accept_data_loss: bool,
) -> Result<Plan> {
    refuse_busy(cp)?;
    let access = ctx.access(cp)?;
    let (machines, observed, _) =
        status::decision(&ctx.store, &ctx.provider, &access.etcd, cp).await?;
    let seen = Seen {
        ctx,
        cp,
        machines: &machines,
        obs: &observed.observation,
        leader: leader_machine(&machines, observed.view.leader_url.as_ref()),
        old: machines.iter().map(|m| m.name.as_str()).collect(),
    };
    let token = fresh_token(&cp.name);
    let mut text = String::new();
    let source = match from {
        From::Member(m) => seen.recover_from_member(m, accept_data_loss, &mut text)?,
        From::Snapshot(which) => {
            seen.restore_snapshot(which, now_unix_s, &token, &mut text)
                .await?
        }
    };
    let _ = write!(
        text,
        "a controller performs it once confirmed; every step is recorded before it is taken, so a crash resumes it"
    );
    Ok(Plan {
        rebuild: Rebuild {
            from: source,
            token,
            phase: RebuildPhase::Fencing,
            requested_at_unix_s: now_unix_s,
        },
        text,
    })
}

/// Refuses to plan a rebuild of a control plane being deleted, or of one whose
/// rebuild is already under way.
fn refuse_busy(cp: &ControlPlane) -> Result<()> {
    let name = &cp.name;
    if cp.deleting {
        bail!("{name} is being deleted: there is nothing to rebuild");
    }
    if let Some(rb) = &cp.rebuild {
        bail!(
            "{name}: a rebuild from {} is already under way (phase: {}); `quorum status {name}` follows it",
            rb.from,
            rb.phase
        );
    }
    Ok(())
}

/// The machine whose member answers as leader at `leader_url`, if any.
fn leader_machine(machines: &[Machine], leader_url: Option<&String>) -> Option<String> {
    leader_url
        .and_then(|url| machines.iter().find(|m| &m.client_url() == url))
        .map(|m| m.name.clone())
}

/// What the steps of a plan share: the control plane and how it was seen just now.
struct Seen<'a> {
    ctx: &'a Ctx,
    cp: &'a ControlPlane,
    machines: &'a [Machine],
    obs: &'a Observation,
    /// The machine of the member that answers as leader, if one does.
    leader: Option<String>,
    /// The names of the machines the rebuild replaces.
    old: Vec<&'a str>,
}

impl Seen<'_> {
    /// The recovery from the surviving member `m`, said in `text`, or refused (see
    /// `check_member`).
    fn recover_from_member(
        &self,
        m: &str,
        accept_data_loss: bool,
        text: &mut String,
    ) -> Result<RebuildSource> {
        let refusal = self.check_member(m, accept_data_loss)?;
        self.say_member_plan(m, refusal.as_deref(), text);
        Ok(RebuildSource::Member {
            machine: m.to_string(),
        })
    }

    /// Refuses a recovery from `m` while a leader answers, from a machine `cp` does not
    /// have or one without data, and (unless `accept_data_loss`) from one that keeps
    /// less than another way back; otherwise the warning for that last case, if any.
    fn check_member(&self, m: &str, accept_data_loss: bool) -> Result<Option<String>> {
        let name = &self.cp.name;
        if let Some(l) = &self.leader {
            bail!(
                "{name} has a leader ({l}): quorum is not lost, and forcing a new cluster would throw away what the others hold. A failed member is replaced on its own (see `quorum status {name}`); to go back to a snapshot, use `quorum restore {name} --from ID`"
            );
        }
        let Some(o) = self.machines.iter().find(|x| x.name == m) else {
            bail!(
                "{name} has no machine {m:?}: {}",
                if self.old.is_empty() {
                    "it has no machines (nothing to recover from)".to_string()
                } else {
                    format!("its machines are {}", self.old.join(", "))
                }
            );
        };
        let seen = self.obs.machines.get(&o.name);
        if !seen.is_some_and(|s| s.has_data) {
            bail!(
                "{m} has no data left on this host: nothing to recover from; `quorum restore {name} --from newest` restores the newest snapshot"
            );
        }
        let refusal = worse_choice(self.ctx, self.cp, m, self.machines, self.obs)?;
        if let (Some(why), false) = (&refusal, accept_data_loss) {
            bail!(
                "{name}: not recovering from {m}: {why}. To recover from {m} all the same, give --accept-data-loss"
            );
        }
        Ok(refusal)
    }

    /// The steps of a recovery from `m` and what it loses, with the warning accepted
    /// by --accept-data-loss, if any.
    fn say_member_plan(&self, m: &str, warning: Option<&str>, text: &mut String) {
        let name = &self.cp.name;
        let _ = writeln!(
            text,
            "quorum will recover {name} from its member {m}{}:",
            match self.applied_index(m) {
                Some(a) => format!(" (applied index {a})"),
                None => " (it does not answer now; it is started from its data)".into(),
            }
        );
        let others: Vec<&str> = self.old.iter().copied().filter(|x| *x != m).collect();
        let _ = writeln!(
            text,
            "  1. fence every other old member ({}): stop it and move its directory to {}, so none can come back",
            if others.is_empty() { "none".into() } else { others.join(", ") },
            self.ctx.provider.fenced_dir().display()
        );
        let _ = writeln!(
            text,
            "  2. stop {m} and start it with --force-new-cluster: it keeps every write it applied and becomes a cluster of one"
        );
        let _ = writeln!(
            text,
            "  3. grow it back to {} members through learners, the normal safe path",
            self.cp.spec.replicas
        );
        let _ = writeln!(
            text,
            "what is lost: writes the lost members acknowledged that {m} never applied, if any"
        );
        if let Some(why) = warning {
            let _ = writeln!(text, "warning: {why} (accepted with --accept-data-loss)");
        }
    }

    /// How far the member on machine `m` has applied, if it answers.
    fn applied_index(&self, m: &str) -> Option<u64> {
        self.obs
            .machines
            .get(m)
            .and_then(|s| s.status.as_ref())
            .map(|st| st.raft_applied_index.max(st.raft_index))
    }

    /// The restore of the snapshot `which` (an id, or `newest`), said in `text`, or
    /// refused if its test restore failed.
    async fn restore_snapshot(
        &self,
        which: &str,
        now_unix_s: i64,
        token: &str,
        text: &mut String,
    ) -> Result<RebuildSource> {
        let name = &self.cp.name;
        let rec = crate::snapshot::find(self.ctx, name, which)?;
        refuse_failed(name, &rec)?;
        self.say_snapshot_plan(&rec, now_unix_s, token, text);
        say_watchers(self.ctx, self.cp.spec.version, text).await?;
        Ok(RebuildSource::Snapshot {
            id: rec.id.clone(),
            revision: rec.facts.revision,
        })
    }

    /// The steps of a restore of `rec` and the writes it loses.
    fn say_snapshot_plan(
        &self,
        rec: &SnapshotRecord,
        now_unix_s: i64,
        token: &str,
        text: &mut String,
    ) {
        let name = &self.cp.name;
        let ago_s = (now_unix_s - rec.taken_at_unix_s).max(0);
        let _ = writeln!(
            text,
            "quorum will restore {name} from snapshot {} (taken {} ago from {}; revision {}, {} keys; {}):",
            rec.id,
            age(ago_s),
            rec.from_machine,
            rec.facts.revision,
            rec.facts.total_keys,
            verified_words(rec)
        );
        let _ = writeln!(
            text,
            "  1. fence the old members ({}): stop each and move its directory to {}, so none can come back",
            if self.old.is_empty() { "none left".into() } else { self.old.join(", ") },
            self.ctx.provider.fenced_dir().display()
        );
        let _ = writeln!(
            text,
            "  2. restore the snapshot into one new member with a fresh cluster token ({token}): a new cluster that can never be taken for the old one"
        );
        let _ = writeln!(
            text,
            "  3. grow it back to {} members through learners, the normal safe path",
            self.cp.spec.replicas
        );
        let _ = writeln!(
            text,
            "what is lost: every write after revision {}{}",
            rec.facts.revision,
            match self.revision_now() {
                Some(r) if r > rec.facts.revision => format!(
                    " ({name} answers at revision {r} now: {} revisions)",
                    r - rec.facts.revision
                ),
                Some(r) => format!(" ({name} answers at revision {r} now: nothing)"),
                None => " (the cluster does not answer, so how many is unknown)".into(),
            }
        );
    }

    /// The newest revision a member answers at, if the cluster has a leader.
    fn revision_now(&self) -> Option<i64> {
        self.obs
            .machines
            .values()
            .filter_map(|m| m.status.as_ref().map(|st| st.revision))
            .max()
            .filter(|_| self.leader.is_some())
    }
}

/// What a restore means for watchers: whether the tool that restores a member of
/// `runs` moves revisions on past the old cluster's, or clients with watches must
/// re-list.
async fn say_watchers(ctx: &Ctx, runs: quorum_core::Version, text: &mut String) -> Result<()> {
    let tool = quorum_backup::restore_tool(ctx.provider.etcd_dir(), runs)?;
    if quorum_backup::supports_revision_bump(&tool).await {
        let _ = writeln!(
            text,
            "watchers: revisions move on by {} and older ones are marked compacted, so a watch resumed from the old cluster is told to re-list",
            quorum_backup::REVISION_BUMP
        );
    } else {
        let _ = writeln!(
            text,
            "watchers: {} cannot move revisions on (--bump-revision needs etcd 3.5.10 or later): clients with watches must re-list after the restore",
            tool.display()
        );
    }
    Ok(())
}

/// Whether recovering `cp` from its member `m` keeps less than another way back
/// (`quorum_core::survivor`): another survivor that answers, or the newest verified
/// snapshot.
fn worse_choice(
    ctx: &Ctx,
    cp: &ControlPlane,
    m: &str,
    machines: &[quorum_core::Machine],
    obs: &quorum_core::Observation,
) -> Result<Option<String>> {
    use quorum_core::survivor::{worse_than_another, Survivor};
    let survivors: Vec<Survivor<'_>> = machines
        .iter()
        .map(|x| {
            let st = obs.machines.get(&x.name).and_then(|s| s.status.as_ref());
            Survivor::of(&x.name, x.serial, st)
        })
        .collect();
    let Some(chosen) = survivors.iter().find(|s| s.machine == m) else {
        return Ok(None);
    };
    // The newest verified snapshot as the core picks it (by when it was taken), not
    // the store's listing order.
    let seen: Vec<_> = ctx
        .store
        .snapshots(&cp.name)?
        .iter()
        .map(|r| r.seen())
        .collect();
    let verified = quorum_core::backup::newest_verified(&seen).map(|s| (s.id.as_str(), s.revision));
    Ok(worse_than_another(chosen, &survivors, verified))
}

/// Records the confirmed rebuild, unless one was recorded since the plan was made.
pub fn confirm(ctx: &mut Ctx, name: &str, plan: &Plan) -> Result<()> {
    let cp = ctx.store.get_control_plane(name)?;
    if let Some(rb) = &cp.rebuild {
        bail!(
            "{name}: a rebuild from {} was recorded meanwhile; `quorum status {name}` follows it",
            rb.from
        );
    }
    ctx.store.set_rebuild(name, Some(&plan.rebuild))?;
    Ok(())
}

/// A snapshot whose last test restore failed is no ground to rebuild on.
pub(crate) fn refuse_failed(name: &str, rec: &SnapshotRecord) -> Result<()> {
    match &rec.verification {
        Some(v) if !v.ok => bail!(
            "snapshot {} failed its test restore ({}): restore from another (`quorum snapshots {name}`), or test it again with `quorum snapshots {name} --verify {}`",
            rec.id,
            v.error.as_deref().unwrap_or("no reason recorded"),
            rec.id
        ),
        _ => Ok(()),
    }
}

pub(crate) fn verified_words(rec: &SnapshotRecord) -> String {
    match &rec.verification {
        Some(v) if v.ok => format!("verified by a test restore: {} keys read back", v.keys),
        Some(_) => "its test restore failed".into(),
        None => "NOT verified by a test restore yet".into(),
    }
}

/// `45s`, `12m`, `3h`, `2d`.
pub(crate) fn age(s: i64) -> String {
    match s {
        0..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", s / 60),
        7_200..=172_799 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A cluster token no cluster had before: the name and 64 random bits.
pub(crate) fn fresh_token(name: &str) -> String {
    format!("{name}-{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_named() {
        let (a, b) = (fresh_token("prod"), fresh_token("prod"));
        assert_ne!(a, b);
        assert!(
            a.starts_with("prod-") && a.len() == "prod-".len() + 16,
            "{a}"
        );
    }

    #[test]
    fn ages_read_well() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3_600), "3h");
        assert_eq!(age(3 * 86_400), "3d");
    }
}
