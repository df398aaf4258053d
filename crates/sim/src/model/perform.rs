//! The model's transitions: every action performed against the abstract etcd, provider
//! and store (the properties that concern an action checked as it happens), and every
//! successor of a state: the controller's passes (crashing after any prefix of a
//! decision), the deposed controller's one stale step, and the environment.

use super::*;

/// Performs one action. `fenced`: the deposed controller, whose store writes fail.
/// Returns false if etcd refused (the rest of the decision is not performed), or an
/// error for a violated property.
pub(super) fn perform(s: &mut State, a: &Action, fenced: bool) -> Result<bool, String> {
    s.check_membership(a)?;
    // The host's agent does not answer: nothing happens there, and the pass ends.
    if s.host_down.is_some() && crate::World::provider_target(a) == s.host_down.as_deref() {
        return Ok(false);
    }
    match a {
        Action::AllocateMachine {
            bootstrap,
            version,
            remediation,
        } => {
            if !fenced {
                allocate(s, *bootstrap, *version, remediation.as_ref());
            }
        }
        Action::MarkDeleting {
            machine,
            remediation,
            ..
        } => {
            if !fenced {
                mark_leaving(s, machine, remediation.as_ref());
            }
        }
        // The model's data directories carry their marker from their first start (it
        // is the observation's `marker`), and its keyspace never fills: the simulator
        // covers markers and space upkeep.
        Action::ForgetControlPlane
        | Action::WriteMarker { .. }
        | Action::Compact { .. }
        | Action::Defragment { .. }
        | Action::DisarmAlarm { .. }
        // Never decided here: the model's observation gives no creation time, so the
        // core schedules no snapshot and prunes none (the simulator covers them).
        | Action::TakeSnapshot { .. }
        | Action::PruneSnapshot { .. }
        | Action::VerifySnapshot { .. }
        // Nor this: the model's observation reports no fenced directory.
        | Action::PruneFenced { .. } => {}
        Action::FenceMachine { .. }
        | Action::SetRebuildPhase { .. }
        | Action::RestoreSnapshot { .. }
        | Action::ForceNewCluster { .. }
        | Action::FinishRebuild { .. } => s.perform_rebuild(a, fenced)?,
        Action::SetCaPhase { .. } | Action::FinishCaRotation { .. } => {
            if !fenced {
                record_ca(s, a);
            }
        }
        Action::TakeNextLink { from, to } => {
            if !fenced {
                take_next_link(s, *from, *to)?;
            }
        }
        Action::BeginInPlace { .. }
        | Action::SetInPlacePhase { .. }
        | Action::EndInPlace { .. } => s.perform_in_place(a, fenced),
        Action::StartMachine { machine, state, .. } => start(s, machine, *state)?,
        Action::AddLearner { peer_url, .. } => return Ok(add_learner(s, peer_url)),
        Action::Promote { member_id, .. } => return Ok(promote(s, *member_id)),
        Action::MoveLeader { to_member, .. } => return Ok(move_leader(s, *to_member)),
        Action::RemoveMember { member_id, machine } => {
            return remove_member(s, *member_id, machine.as_deref())
        }
        Action::StopMachine { machine } => stop(s, machine, fenced)?,
        Action::DeleteMachine { machine } => delete(s, machine, fenced)?,
    }
    Ok(true)
}

/// A new machine's record and its (stopped) process.
fn allocate(
    s: &mut State,
    bootstrap: bool,
    version: Version,
    remediation: Option<&quorum_core::Remediation>,
) {
    let remediation = remediation.cloned();
    let tls = s.variant.ca_rotation;
    let m = Machine {
        bootstrap,
        remediation,
        tls,
        // The stores record a rotation's phase with the allocation.
        ca_step: s.cp.ca_step_now().filter(|_| tls),
        placement: None,
        address: s.take_address(),
        ..machine(s.next_serial, version)
    };
    s.next_serial += 1;
    s.procs
        .push(Proc::new(m.name.clone(), false, false, version));
    s.machines.push(m);
}

/// A machine marked leaving (`Machine::mark_deleting`): it leaves the endpoints at the
/// next pass.
fn mark_leaving(s: &mut State, machine: &str, remediation: Option<&quorum_core::Remediation>) {
    if let Some(m) = s.machines.iter_mut().find(|m| m.name == machine) {
        m.mark_deleting(remediation);
        // It leaves the endpoints at the next pass: a new drain, and the
        // load balancer serves it until a pass brings it in step.
        s.drain_started = false;
        s.drain_passed = false;
        s.lb_serves.push(machine.to_string());
    }
}

/// A chained upgrade's next link, recorded only once every process runs the link
/// under way (`chain`'s invariant).
fn take_next_link(s: &mut State, from: Version, to: Version) -> Result<(), String> {
    if let Some(p) = s.procs.iter().find(|p| p.binary != from) {
        return Err(format!(
            "the link to {to} was taken while {} runs {}, not {from}",
            p.name, p.binary
        ));
    }
    s.cp.take_next_link(from, to, NOW_UNIX_S);
    Ok(())
}

/// A CA rotation's record writes.
fn record_ca(s: &mut State, a: &Action) {
    match a {
        Action::SetCaPhase { phase } => {
            if let Some(r) = s.cp.ca_rotation.as_mut() {
                r.phase = *phase;
            }
        }
        Action::FinishCaRotation { generation }
            if s.cp.ca_rotation.as_ref().map(|r| r.to) == Some(*generation) =>
        {
            s.cp.ca_rotation = None;
            s.cp.ca_generation = *generation;
        }
        _ => {}
    }
}

/// A start: the provider's, with etcd's answer to it (a seed, a restart, a member that
/// is none, a binary that cannot run).
fn start(s: &mut State, machine: &str, state: quorum_core::ClusterState) -> Result<(), String> {
    let found = s
        .machines
        .iter()
        .find(|m| m.name == machine)
        .map(|m| (m.serial, m.version, s.cp.ca_generations(m.ca_step)));
    let Some((serial, binary, files)) = found else {
        return Ok(());
    };
    // The provider leaves a running process alone.
    if s.proc(machine).is_some_and(|p| p.running) {
        return Ok(());
    }
    // etcd ignores `new` where a member's data is (a deposed controller's stale
    // start of a seed that served already is a restart); otherwise only a
    // restore's fresh seed starts `new` (`rebuild.rs`).
    let restart = s.variant.recreate
        && s.proc(machine).is_some_and(|p| p.has_data)
        && s.members.iter().any(|m| m.serial == serial && m.named);
    if state == quorum_core::ClusterState::New && !restart {
        s.start_seed(machine)?;
        return Ok(());
    }
    let lost = s.members.iter().any(|m| m.serial == serial && m.named)
        && s.proc(machine).is_some_and(|p| !p.has_data && !p.running);
    if lost {
        return Err(format!("{machine} started on lost data"));
    }
    let is_member = s.members.iter().any(|m| m.serial == serial);
    // The binary of the record's version: below the cluster version, or broken
    // on this machine, it exits at once.
    let runs = s.check_binary(machine, binary)?;
    if let Some(p) = s.proc_mut(machine) {
        p.binary = binary;
        p.files = files;
    }
    // etcd started for a machine that is not a member exits at once.
    if is_member && runs {
        s.note_start(machine);
        if let Some(p) = s.proc_mut(machine) {
            p.running = true;
            p.has_data = true;
        }
        if let Some(m) = s.members.iter_mut().find(|m| m.serial == serial) {
            m.named = true;
        }
    }
    Ok(())
}

/// `member add --learner`: false if etcd refused.
fn add_learner(s: &mut State, peer_url: &str) -> bool {
    if s.leader.is_none() {
        return false;
    }
    if s.members.iter().any(|m| m.peer_url == peer_url) {
        return true; // already done
    }
    if s.members.iter().any(|m| m.is_learner) {
        return false; // too many learners
    }
    let id = s.next_member_id;
    s.next_member_id += 1;
    s.members.push(MMember {
        id,
        peer_url: peer_url.to_string(),
        // The machine recorded at that URL now (addresses are taken again,
        // `reach`, but never while a record holds them).
        serial: s
            .machines
            .iter()
            .find(|m| m.peer_url() == peer_url)
            .map_or_else(|| serial_of_url(peer_url), |m| m.serial),
        named: false,
        is_learner: true,
        caught_up: false,
    });
    true
}

/// `member promote`: false if etcd refused.
fn promote(s: &mut State, member_id: u64) -> bool {
    if s.leader.is_none() {
        return false;
    }
    match s.members.iter_mut().find(|m| m.id == member_id) {
        Some(m) if m.is_learner && !m.caught_up => return false,
        Some(m) => m.is_learner = false,
        None => return false,
    }
    true
}

/// `move-leader`: false if etcd refused.
fn move_leader(s: &mut State, to_member: u64) -> bool {
    let ok = s
        .members
        .iter()
        .any(|m| m.id == to_member && !m.is_learner && s.member_running(m));
    if s.leader.is_none() || !ok {
        return false;
    }
    s.leader = Some(to_member);
    true
}

/// `member remove`, checked against the drain: false if etcd refused.
fn remove_member(s: &mut State, member_id: u64, machine: Option<&str>) -> Result<bool, String> {
    if let Some(m) = machine {
        s.check_removal_paced(m)?;
    }
    if s.leader.is_none() {
        return Ok(false);
    }
    // etcd's strict reconfiguration check (on by default): a removal must leave a
    // running majority of the remaining voters. quorum's own projection never
    // relies on it; a deposed controller's stale removal, decided before a member
    // died, is what it stops.
    let remaining: Vec<&MMember> = s.voters().filter(|m| m.id != member_id).collect();
    let running = remaining.iter().filter(|m| s.member_running(m)).count();
    let voter = s.members.iter().any(|m| m.id == member_id && !m.is_learner);
    if s.variant.etcd_strict && voter && running < quorum_size(remaining.len()) {
        return Ok(false);
    }
    s.members.retain(|m| m.id != member_id);
    if s.leader == Some(member_id) {
        s.leader = None;
    }
    Ok(true)
}

/// A stop (a learner's only as the rules allow, an in-place one with its checks).
fn stop(s: &mut State, machine: &str, fenced: bool) -> Result<(), String> {
    if !fenced {
        s.check_learner_stop(machine)?;
    }
    let in_place = s.before_stop(machine)?;
    if let Some(p) = s.proc_mut(machine) {
        p.running = false;
    }
    if in_place {
        s.after_stop(machine)?;
    }
    Ok(())
}

/// A machine deleted (never while its member votes): its process and data go, and its
/// record unless fenced.
fn delete(s: &mut State, machine: &str, fenced: bool) -> Result<(), String> {
    if let Some(m) = s.machines.iter().find(|m| m.name == machine) {
        let serial = m.serial;
        if s.members
            .iter()
            .any(|x| x.serial == serial && !x.is_learner)
        {
            return Err(format!("{machine} deleted while its member votes"));
        }
    }
    if let Some(p) = s.proc_mut(machine) {
        p.running = false;
        p.has_data = false;
    }
    if !fenced {
        s.machines.retain(|m| m.name != machine);
        s.procs.retain(|p| p.name != machine);
        s.drained.retain(|m| m != machine);
        s.lb_serves.retain(|m| m != machine);
    }
    Ok(())
}

/// Every successor of `s`, or a violated property.
pub(super) fn successors(s: &State) -> Result<Vec<(String, State)>, String> {
    let mut out = Vec::new();
    let (tracked, pass, mem) = begin(s)?;
    let idle = controller_passes(s, &tracked, &pass, &mem, &mut out)?;
    deposed_decides(s, &tracked, &pass, &mem, &mut out)?;
    stale_steps(s, &mut out)?;
    environment_steps(s, pass.decision(), idle, &mut out);
    normalize(&mut out);
    Ok(out)
}

/// The controller's pass (`quorum_core::pass`) begun on `s`: the state with its health
/// memory brought up to date, the pass and the memory it keeps. Its decision is checked.
fn begin(s: &State) -> Result<(State, Pass, pass::Memory<Remembered>), String> {
    let mut tracked = s.clone();
    let mut mem = s.pass_memory();
    let mut observed = s.observe();
    let pass = Pass::begin(&s.cp, s.machines.clone(), &mut observed, None, &mut mem);
    tracked.memory.clone_from(&mem.health.memory);
    let d = pass.decision();
    tracked.check_endpoints(&d.endpoints)?;
    if d.actions
        .iter()
        .filter(|a| a.is_membership_change())
        .count()
        > 1
    {
        return Err("several membership changes in one decision".into());
    }
    Ok((tracked, pass, mem))
}

/// The controller's passes: each performs a prefix of the decision (a shorter one is a
/// crash). True if it is idle: no pass changes anything (it waits, or what it does, such
/// as a start that exits at once, leaves all as it was).
fn controller_passes(
    s: &State,
    tracked: &State,
    pass: &Pass,
    mem: &pass::Memory<Remembered>,
    out: &mut Vec<(String, State)>,
) -> Result<bool, String> {
    let n_actions = pass.decision().actions.len();
    let mut idle = tracked == s;
    if n_actions == 0 && tracked != s {
        out.push((
            "controller: notes the problems it sees".to_string(),
            tracked.clone(),
        ));
    }
    for k in 1..=n_actions {
        let crash = k < n_actions;
        if crash && s.crashes >= MAX_CRASHES {
            continue;
        }
        let mut n = tracked.clone();
        let steps = drive(&mut n, &mut pass.clone(), &mut mem.clone(), k)?;
        let mut label = steps.join(", ");
        if crash {
            n.crashes += 1;
            // Its pacing and health memory go with it: the next controller drains again
            // and counts every problem afresh.
            n.drain_started = false;
            n.drain_passed = false;
            n.memory.clear();
            label.push_str(" (then the controller crashes)");
        }
        idle &= n == *s;
        out.push((format!("controller: {label}"), n));
    }
    Ok(idle)
}

/// Answers `pass`'s requests against `n`, performing at most `k` actions; returns what
/// it did, in words.
fn drive(
    n: &mut State,
    pass: &mut Pass,
    mem: &mut pass::Memory<Remembered>,
    k: usize,
) -> Result<Vec<String>, String> {
    let now_ms = n.pass_now_ms();
    let mut steps = Vec::new();
    let mut performed = 0;
    let mut acting = false;
    while performed < k {
        let request = pass.next(mem, now_ms);
        if !acting && matches!(request, Request::Perform(_) | Request::Done(_)) {
            // Acting began: its pacing saw the leaving machines (their drain clock
            // started, after the endpoints were published without them).
            acting = true;
            let seen = |m: &Machine| mem.pacing.drain_until_ms(&m.name).is_some();
            n.drain_started |= n.machines.iter().any(seen);
        }
        match request {
            // The model checks the decision's endpoints itself (`check_endpoints`).
            Request::Record(_) | Request::Publish(_) => {}
            Request::Balance => balance(n, pass),
            Request::Perform(p) => {
                steps.push(p.action.to_string());
                performed += 1;
                let attempt = match perform(n, &p.action, false)? {
                    true => Attempt::Done,
                    false => Attempt::Refused,
                };
                pass.performed(mem, attempt, now_ms, 0);
            }
            Request::Done(end) => {
                if let Some(Stop::Held { action, hold }) = end.stopped {
                    steps.push(format!("holds '{action}' ({hold})"));
                }
                break;
            }
        }
    }
    Ok(steps)
}

/// A pass brings a reachable load balancer in step with its endpoints.
fn balance(n: &mut State, pass: &mut Pass) {
    if n.lb_reachable {
        n.lb_serves.clear();
    }
    pass.balanced(n.lb_reachable);
}

/// The deposed controller decides now and acts later, once: its pass brings a reachable
/// load balancer in step too, and its step passed the same pacing check.
fn deposed_decides(
    s: &State,
    tracked: &State,
    pass: &Pass,
    mem: &pass::Memory<Remembered>,
    out: &mut Vec<(String, State)>,
) -> Result<(), String> {
    if !s.variant.deposed || s.stale.is_some() || s.stale_used {
        return Ok(());
    }
    let mut n = tracked.clone();
    let (mut its_pass, mut its_mem) = (pass.clone(), mem.clone());
    let now_ms = s.pass_now_ms();
    let a = loop {
        match its_pass.next(&mut its_mem, now_ms) {
            Request::Balance => balance(&mut n, &mut its_pass),
            Request::Perform(p) => break p.action,
            Request::Done(_) => return Ok(()),
            Request::Record(_) | Request::Publish(_) => {}
        }
    };
    // Held back unless faults may happen anywhere: a stale start (nothing checks the
    // data again) and a stale stop of a member (nothing fences a kill).
    let member_stop = match &a {
        Action::StopMachine { machine } => s
            .machines
            .iter()
            .find(|m| &m.name == machine)
            .is_some_and(|x| s.members.iter().any(|m| m.serial == x.serial)),
        _ => false,
    };
    let unfenced = matches!(a, Action::StartMachine { .. }) || member_stop;
    if !s.variant.faults_anywhere && unfenced {
        return Ok(());
    }
    // A store write only: fenced whenever it comes, so it may as well come now (one
    // transition, not a pending step in every later state).
    if a.writes_records_only() {
        perform(&mut n, &a, true)?;
        if n.machines != tracked.machines {
            return Err(format!(
                "a deposed controller's '{a}' changed the machine records"
            ));
        }
        n.stale_used = true;
        out.push((format!("deposed controller's '{a}' is fenced"), n));
    } else {
        n.stale = Some(a.clone());
        out.push((format!("deposed controller decides: {a}"), n));
    }
    Ok(())
}

/// The deposed controller performs its pending step.
fn stale_steps(s: &State, out: &mut Vec<(String, State)>) -> Result<(), String> {
    if let Some(a) = &s.stale {
        let mut n = s.clone();
        n.stale = None;
        n.stale_used = true;
        let added = |x: &State, url: &str| x.members.iter().any(|m| m.peer_url == url);
        if let Action::AddLearner { peer_url, .. } = a {
            if !added(&n, peer_url) {
                perform(&mut n, a, true)?;
                if added(&n, peer_url) {
                    n.stale_learner = Some(peer_url.clone());
                }
            }
        } else {
            perform(&mut n, a, true)?;
        }
        // Its store writes are fenced: no record changes.
        if n.machines != s.machines {
            return Err(format!(
                "a deposed controller's '{a}' changed the machine records"
            ));
        }
        out.push((format!("deposed controller performs: {a}"), n));
    }
    Ok(())
}

/// The environment's steps, and the person's. `idle`: no controller pass changes
/// anything.
fn environment_steps(s: &State, d: &Decision, idle: bool, out: &mut Vec<(String, State)>) {
    settle_steps(s, out);
    failure_steps(s, out);
    s.publish_steps(out);
    time_steps(s, out);
    s.in_place_env(d, idle, out);
    election_step(s, out);
}

/// Learners catch up, and removed members' processes exit.
fn settle_steps(s: &State, out: &mut Vec<(String, State)>) {
    for (i, m) in s.members.iter().enumerate() {
        if m.is_learner && !m.caught_up && s.member_running(m) {
            let mut n = s.clone();
            n.members[i].caught_up = true;
            out.push((format!("learner {} catches up", m.id), n));
        }
    }
    for (i, p) in s.procs.iter().enumerate() {
        let member = s
            .machines
            .iter()
            .find(|x| x.name == p.name)
            .and_then(|x| s.members.iter().find(|m| m.serial == x.serial));
        if p.running && member.is_none() {
            // A removed member's process shuts itself down.
            let mut n = s.clone();
            n.procs[i].running = false;
            out.push((format!("removed member's process {} exits", p.name), n));
        }
    }
}

/// The run's one failure, where it may come, and a lost host's return.
fn failure_steps(s: &State, out: &mut Vec<(String, State)>) {
    // One fault per run (a death or a cut-off member): a 3-member cluster tolerates one
    // failure. With two (a voter dead and the learner cut off), a deposed controller's
    // promote decided before both can lose quorum: that window is bounded by the
    // distributed store's fencing and leadership re-check, not by this core.
    // A control plane brought back from a snapshot grows from one voter: a learner that
    // dies there, with a deposed controller's promote decided before, makes two voters
    // with one running, the same window as above. Its one failure comes once it has
    // three voters again.
    let growing = s.variant.recreate && s.voters().count() < 3;
    // A lost publish is the run's one failure too: the model's abstract time lets the
    // learner's silence last `unhealthyAfter`, which it never does (the rule acts at 2s,
    // unhealthyAfter is 5s or more), so its replacement may spend the slot's retries.
    let fault_free =
        !growing && !s.died && !s.partition_used && !s.disk_lost && !s.host_used && !s.publish_used;
    let leaving = s.machines.iter().any(|m| m.deleting);
    let disk_may_go = s.variant.faults_anywhere || !leaving;
    if fault_free && s.variant.hosts {
        host_lost_steps(s, out);
    }
    if let Some(h) = &s.host_down {
        let mut n = s.clone();
        n.host_down = None;
        out.push((format!("the host of {h} is back (its process stopped)"), n));
    }
    if fault_free && !s.variant.hosts {
        death_steps(s, disk_may_go, out);
        hang_steps(s, out);
    }
}

/// A host is lost (once).
fn host_lost_steps(s: &State, out: &mut Vec<(String, State)>) {
    // A host is lost (once): its process stops, its agent goes silent; only when
    // a majority would still run.
    for (i, p) in s.procs.iter().enumerate() {
        if !p.running {
            continue;
        }
        let mut n = s.clone();
        n.procs[i].running = false;
        n.host_down = Some(p.name.clone());
        n.host_used = true;
        if n.has_quorum() {
            n.forget_dead_leader();
            out.push((format!("the host of {} is lost", p.name), n));
        }
    }
}

/// A member's process dies (once), or its disk is lost with it.
fn death_steps(s: &State, disk_may_go: bool, out: &mut Vec<(String, State)>) {
    // A member's process dies (once), or its disk is lost with it: only when a
    // majority would still run, so any quorum loss is quorum's doing, not the
    // environment's.
    for (i, p) in s.procs.iter().enumerate() {
        if !p.running {
            continue;
        }
        let mut n = s.clone();
        n.procs[i].running = false;
        n.died = true;
        if n.has_quorum() {
            let mut lost = n.clone();
            lost.died = false;
            lost.disk_lost = true;
            lost.procs[i].has_data = false;
            if lost.leader.is_some_and(|l| {
                lost.members
                    .iter()
                    .find(|m| m.id == l)
                    .is_some_and(|m| !lost.member_running(m))
            }) {
                lost.leader = None;
            }
            if disk_may_go {
                out.push((format!("{} loses its disk", p.name), lost));
            }
            n.forget_dead_leader();
            out.push((format!("{}'s process dies", p.name), n));
        }
    }
}

/// A member hangs, or is cut off from its peers and the controller (once).
fn hang_steps(s: &State, out: &mut Vec<(String, State)>) {
    for m in s.members.iter().filter(|m| s.member_running(m)) {
        let mut n = s.clone();
        n.partitioned = Some(m.id);
        n.partition_used = true;
        if n.has_quorum() {
            if n.leader == Some(m.id) {
                n.leader = None;
            }
            out.push((format!("member {} hangs (or is cut off)", m.id), n));
        }
    }
}

/// Time passes: a hung member resumes, a remembered problem lasts, the drain passes, a
/// shard moves, the load balancer comes and goes.
fn time_steps(s: &State, out: &mut Vec<(String, State)>) {
    if s.partitioned.is_some() {
        let mut n = s.clone();
        n.partitioned = None;
        out.push(("the hung member resumes".to_string(), n));
    }
    // Time: a problem the controller remembers lasts `unhealthyAfter` (each on its own,
    // so its memory may say anything about the problems it sees).
    for (i, (m, due)) in s.memory.iter().enumerate() {
        if !due {
            let mut n = s.clone();
            n.memory[i].1 = true;
            out.push((format!("{m}'s problem lasts unhealthyAfter"), n));
        }
    }
    // Time: the controller's drain clock passes (the leaving machines' endpoints have
    // been unpublished at least that long).
    if s.drain_started && !s.drain_passed {
        let mut n = s.clone();
        n.drain_passed = true;
        for m in s
            .machines
            .iter()
            .filter(|m| m.deleting || m.in_place_out_of_service())
        {
            if !n.drained.contains(&m.name) {
                n.drained.push(m.name.clone());
            }
        }
        out.push(("the drain passes".to_string(), n));
    }
    // A sharded fleet: the shard moves to another replica between two passes (one
    // joined, or its holder died); the new holder remembers nothing.
    if s.variant.sharded && s.shard_moves < MAX_SHARD_MOVES {
        let mut n = s.clone();
        n.shard_moves += 1;
        n.drain_started = false;
        n.drain_passed = false;
        n.memory.clear();
        out.push((
            "the shard moves to another replica (it starts with no memory)".to_string(),
            n,
        ));
    }
    if s.lb_reachable && !s.lb_fault_used {
        let mut n = s.clone();
        n.lb_reachable = false;
        n.lb_fault_used = true;
        out.push(("the load balancer becomes unreachable".to_string(), n));
    }
    if !s.lb_reachable {
        let mut n = s.clone();
        n.lb_reachable = true;
        out.push(("the load balancer is reachable again".to_string(), n));
    }
}

/// A leaderless cluster with a quorum running elects.
fn election_step(s: &State, out: &mut Vec<(String, State)>) {
    // A leader needs a quorum of running voters (with a majority gone, none is elected
    // until the recovery forces a cluster of one).
    if s.leader.is_none() && s.has_quorum() {
        if let Some(m) = s
            .voters()
            .filter(|m| s.member_running(m))
            .min_by_key(|m| m.id)
        {
            let mut n = s.clone();
            n.leader = Some(m.id);
            out.push((format!("member {} is elected", m.id), n));
        }
    }
}

/// Every successor in one canonical form (sorted lists), so equal states compare equal.
fn normalize(out: &mut [(String, State)]) {
    for (_, n) in out.iter_mut() {
        n.members.sort_by_key(|m| m.id);
        n.procs.sort_by(|a, b| a.name.cmp(&b.name));
        n.machines.sort_by_key(|m| m.serial);
        n.drained.sort();
        n.lb_serves.sort();
        n.lb_serves.dedup();
        n.memory.sort();
    }
}

impl State {
    /// A leader whose process no longer runs leads no more (the rest elect later).
    fn forget_dead_leader(&mut self) {
        let dead = self
            .leader
            .and_then(|l| self.members.iter().find(|m| m.id == l))
            .is_some_and(|m| !self.member_running(m));
        if dead {
            self.leader = None;
        }
    }
}
