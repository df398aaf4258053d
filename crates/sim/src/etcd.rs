//! The simulated etcd: its tick (elections, replication), its membership calls (etcd's
//! rules that matter to quorum, answered with etcd's real (code, message) pairs from
//! `quorum_core::classify`), and what the controller observes of it and the machines.

use super::*;

impl World {
    /// The member of a machine (by the machine it was added for).
    pub(crate) fn member_of_machine(&self, name: &str) -> Option<&SimMember> {
        self.members
            .iter()
            .find(|m| m.machine.as_deref() == Some(name))
    }

    pub(crate) fn machine_of_member(&self, m: &SimMember) -> Option<&Machine> {
        let name = m.machine.as_ref()?;
        self.machines.iter().find(|x| &x.name == name)
    }

    /// Is the member's process running?
    pub(crate) fn member_running(&self, m: &SimMember) -> bool {
        if self.external_running.contains(&m.id) {
            return true;
        }
        self.machine_of_member(m)
            .and_then(|x| self.procs.get(&x.name))
            .is_some_and(|p| p.running)
    }

    /// Running and able to reach its peers: not cut off, not hung, not stalled in a
    /// defragmentation.
    pub(crate) fn member_connected(&self, m: &SimMember) -> bool {
        self.member_running(m)
            && !matches!(&self.impairment, Some((Impairment::PartitionedFromPeers(id), _)) if *id == m.id)
            && self
                .machine_of_member(m)
                .is_none_or(|x| self.responsive(&x.name))
    }

    /// A running process that answers: neither hung nor defragmenting.
    pub(crate) fn responsive(&self, machine: &str) -> bool {
        let hung = matches!(&self.impairment, Some((Impairment::Hung(n), _)) if n == machine);
        !hung
            && self
                .procs
                .get(machine)
                .is_some_and(|p| p.running && p.stalled_until_ms.is_none())
    }

    pub(crate) fn voters(&self) -> impl Iterator<Item = &SimMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    pub(crate) fn connected_voters(&self) -> usize {
        self.voters().filter(|m| self.member_connected(m)).count()
    }

    pub(crate) fn has_quorum(&self) -> bool {
        let voters = self.voters().count();
        voters > 0 && self.connected_voters() >= quorum_size(voters)
    }

    /// One tick of the cluster: elections, replication, client writes, exits.
    pub(crate) fn tick_etcd(&mut self) {
        let resumed = self.end_exits_and_stalls();
        self.reconnect_machines(&resumed);
        self.tick_publish();
        self.tick_leadership();
        // A client write per tick while there is a leader: committed on a quorum of
        // connected voters (unless the keyspace refuses it: NOSPACE), and replicated to
        // every connected member.
        if let Some(l) = self.leader {
            if self.client_write(l) {
                self.commit += 1;
                self.acked = self.commit;
            }
            self.replicate();
            debug_assert!(self
                .members
                .iter()
                .any(|m| m.id == l && m.log == self.commit));
            self.grow_db_files();
        }
        self.monitor_cluster_version();
    }

    /// Removed members shut down by themselves (a hung one once it resumes), and
    /// defragmentations due end; the machines whose stall ended.
    fn end_exits_and_stalls(&mut self) -> Vec<String> {
        let now = self.now_ms;
        let hung = match &self.impairment {
            Some((Impairment::Hung(n), _)) => Some(n.clone()),
            _ => None,
        };
        let mut resumed = Vec::new();
        for (name, p) in self.procs.iter_mut() {
            if p.exit_at_ms.is_some_and(|t| t <= now) && hung.as_ref() != Some(name) {
                p.running = false;
                p.exit_at_ms = None;
            }
            if p.stalled_until_ms.is_some_and(|t| t <= now) {
                p.stalled_until_ms = None;
                resumed.push(name.clone());
            }
        }
        resumed
    }

    /// A leader that lost its quorum or its connection is lost; after `ELECTION_MS`
    /// without one, the connected voter with the longest log wins, if there is a
    /// quorum.
    fn tick_leadership(&mut self) {
        let now = self.now_ms;
        let leader_ok = self
            .leader
            .and_then(|id| self.members.iter().find(|m| m.id == id))
            .is_some_and(|m| !m.is_learner && self.member_connected(m))
            && self.has_quorum();
        if leader_ok {
            return;
        }
        if self.leader.is_some() {
            self.leader = None;
            self.leaderless_since_ms = now;
            self.note("leader lost".into());
        }
        if self.has_quorum() && now - self.leaderless_since_ms >= ELECTION_MS {
            // The connected voter with the longest log wins.
            let winner = self
                .voters()
                .filter(|m| self.member_connected(m))
                .max_by_key(|m| (m.log, m.id))
                .map(|m| m.id);
            if let Some(w) = winner {
                self.leader = Some(w);
                self.term += 1;
                self.note(format!("elected {w:x} in term {}", self.term));
            }
        }
    }

    /// Every connected member takes the leader's log; a learner far behind catches up
    /// by snapshot in a few ticks (slowly if slow).
    fn replicate(&mut self) {
        let commit = self.commit;
        let connected: Vec<bool> = self
            .members
            .iter()
            .map(|m| self.member_connected(m))
            .collect();
        let slow = self.slow_learners.clone();
        for (m, conn) in self.members.iter_mut().zip(connected) {
            if !conn {
                continue;
            }
            if m.is_learner && m.log + 50 < commit {
                let step = if slow.contains(&m.id) {
                    commit / 40 + 1
                } else {
                    commit / 2 + 1
                };
                m.log = (m.log + step).min(commit);
            } else {
                m.log = commit;
            }
        }
    }

    /// Peers reconnect to the members of these machines (their stall ended).
    pub(crate) fn reconnect_machines(&mut self, names: &[String]) {
        let now = self.now_ms;
        let urls: Vec<String> = self
            .machines
            .iter()
            .filter(|x| names.contains(&x.name))
            .map(Machine::peer_url)
            .collect();
        for m in self
            .members
            .iter_mut()
            .filter(|m| urls.contains(&m.peer_url))
        {
            m.connected_since_ms = now;
        }
    }

    pub(crate) fn connected_for_interval(&self, m: &SimMember) -> bool {
        self.member_connected(m) && self.now_ms >= m.connected_since_ms + HEALTH_INTERVAL_MS
    }

    /// etcd's reply (its real answers; `Ok` for success) to an add of a learner.
    pub(crate) fn add_learner(&mut self, peer: &str) -> Result<(), EtcdAnswer> {
        if self.leader.is_none() {
            // The former leader is connected to no voter: the strict check answers.
            return Err(UNHEALTHY_CLUSTER);
        }
        if self.members.iter().any(|m| m.peer_url == peer) {
            return Err(PEER_URLS_EXIST); // the earlier add took effect
        }
        if self.members.iter().any(|m| m.is_learner) {
            return Err(TOO_MANY_LEARNERS);
        }
        if self.cfg.strict_reconfig && !self.voters().all(|m| self.connected_for_interval(m)) {
            return Err(UNHEALTHY_CLUSTER);
        }
        let id = self.new_member_id();
        self.members.push(SimMember {
            id,
            name: String::new(),
            peer_url: peer.to_string(),
            is_learner: true,
            log: 0,
            connected_since_ms: self.now_ms,
            machine: self
                .machines
                .iter()
                .find(|x| x.peer_url() == peer)
                .map(|x| x.name.clone()),
        });
        Ok(())
    }

    pub(crate) fn promote(&mut self, id: u64) -> Result<(), EtcdAnswer> {
        if self.leader.is_none() {
            return Err(NO_LEADER);
        }
        let commit = self.commit;
        let Some(m) = self.members.iter().find(|m| m.id == id) else {
            return Err(MEMBER_NOT_FOUND);
        };
        if !m.is_learner {
            return Err(NOT_A_LEARNER); // it votes already
        }
        if !self.member_connected(m) || m.log * 10 < commit * 9 {
            return Err(LEARNER_NOT_IN_SYNC);
        }
        let m = self
            .members
            .iter_mut()
            .find(|m| m.id == id)
            .expect("found above");
        m.is_learner = false;
        Ok(())
    }

    pub(crate) fn move_leader(&mut self, to: u64) -> Result<(), EtcdAnswer> {
        let Some(l) = self.leader else {
            return Err(NOT_LEADER); // asked of the former leader
        };
        if l == to {
            return Ok(());
        }
        let Some(t) = self.members.iter().find(|m| m.id == to) else {
            return Err(BAD_LEADER_TRANSFEREE);
        };
        if t.is_learner {
            return Err(BAD_LEADER_TRANSFEREE);
        }
        if !self.member_connected(t) {
            // etcd waits for the transfer until the client gives up.
            return Err(CLIENT_DEADLINE);
        }
        self.leader = Some(to);
        self.term += 1;
        Ok(())
    }

    pub(crate) fn remove_member(&mut self, id: u64) -> Result<(), EtcdAnswer> {
        if self.leader.is_none() {
            // etcd holds the change until the client gives up.
            return Err(CLIENT_DEADLINE);
        }
        let Some(idx) = self.members.iter().position(|m| m.id == id) else {
            return Err(MEMBER_NOT_FOUND); // removed already
        };
        if self.cfg.strict_reconfig && !self.members[idx].is_learner {
            // Strict check: a quorum of the remaining voters connected for the interval.
            let remaining: Vec<&SimMember> = self.voters().filter(|m| m.id != id).collect();
            let ok = remaining
                .iter()
                .filter(|m| self.connected_for_interval(m))
                .count();
            if remaining.is_empty() || ok < quorum_size(remaining.len()) {
                return Err(UNHEALTHY_CLUSTER);
            }
        }
        let m = self.members.remove(idx);
        self.external_running.remove(&m.id);
        let exit_at = self.now_ms + REMOVED_EXIT_MS;
        if let Some(mach) = self.machines.iter().find(|x| x.peer_url() == m.peer_url) {
            if let Some(p) = self.procs.get_mut(&mach.name) {
                if p.running {
                    p.exit_at_ms = Some(exit_at);
                }
            }
        }
        if self.leader == Some(id) {
            self.leader = None;
            self.leaderless_since_ms = self.now_ms;
        }
        Ok(())
    }

    /// The provider starts the machine's etcd (a running process is left alone). The
    /// start is recorded, as the provider records it, and checked (`check_start`):
    /// never `new` after the cluster formed, never on lost or foreign data, never
    /// before the restart backoff. `stale`: the deposed leader's in-flight step.
    pub(crate) fn start_machine(&mut self, name: &str, state: ClusterState, stale: bool) -> Answer {
        let Some(mach) = self.machines.iter().find(|m| m.name == name).cloned() else {
            return Answer::Done;
        };
        let now = self.now_ms;
        let member = self
            .members
            .iter()
            .position(|m| m.peer_url == mach.peer_url());
        let broken = matches!(&self.impairment, Some((Impairment::Down(n), _)) if n == name);
        if self.procs.get(name).is_some_and(|p| p.running) {
            return Answer::Done;
        }
        let binary = mach.version;
        self.check_start(name, state, member.map(|i| self.members[i].clone()), stale);
        if state == ClusterState::New {
            self.check_alone(name);
        }
        let now_s = self.now_unix_s();
        let db = self.space.in_use_bytes();
        let p = self.procs.entry(name.to_string()).or_default();
        p.starts_unix_s.push(now_s);
        let extra = p.starts_unix_s.len().saturating_sub(health::STARTS_KEPT);
        p.starts_unix_s.drain(..extra);
        if std::mem::take(&mut p.stop_asked) {
            p.planned_starts_unix_s.push(now_s);
        }
        let oldest = p.starts_unix_s.first().copied().unwrap_or(now_s);
        p.planned_starts_unix_s.retain(|t| *t >= oldest);
        p.binary = Some(binary);
        p.last_start_ms = Some(now);
        self.record_ca_files(name);
        let p = self.procs.entry(name.to_string()).or_default();
        if broken {
            // A broken machine's etcd exits at once: the start "succeeds", nothing runs.
            return Answer::Done;
        }
        if p.crash_starts_left > 0 {
            // A crash loop: it exits right after starting.
            p.crash_starts_left -= 1;
            return Answer::Done;
        }
        // A broken binary, or one below the cluster version, exits at once too.
        if !self.check_binary(name, binary) {
            return Answer::Done;
        }
        let p = self.procs.entry(name.to_string()).or_default();
        match member {
            Some(i) => {
                p.running = true;
                if !p.has_data {
                    // A new member's data: a snapshot of the keyspace, compact.
                    p.db_size_bytes = db;
                }
                p.has_data = true;
                let m = &mut self.members[i];
                m.name = name.to_string();
                m.connected_since_ms = now;
                let learner = m.is_learner;
                self.maybe_lose_publish(name, learner);
                Answer::Done
            }
            // Not a member: etcd exits at start ("member not found in cluster").
            None => Answer::Done,
        }
    }

    /// The simulated clock in Unix seconds, as the observation carries it.
    pub(crate) fn now_unix_s(&self) -> i64 {
        EPOCH_UNIX_S + (self.now_ms / 1_000) as i64
    }

    /// What replica `i` sees before deciding: a fresh observation, with since when each
    /// machine has had a problem from the replica's own memory (its tracker).
    /// Replica `i`'s pass begins (`Pass::begin`) on a fresh observation, with the
    /// endpoints published now (the world's file, which every replica reads).
    pub(crate) fn begin_pass(&mut self, i: usize) -> Pass {
        let mut obs = self.observe();
        let published: Vec<String> = self.published.iter().cloned().collect();
        let pass = Pass::begin(
            &self.cp,
            self.machines.clone(),
            &mut obs,
            Some(&published),
            &mut self.replicas[i].memory,
        );
        for (machine, starts) in &pass.tracked().crash_loops_started {
            self.repair.crash_loop_events += 1;
            let tag = self.tag(i);
            self.note(format!(
                "{tag}event: {machine} is in a crash loop ({starts} starts)"
            ));
        }
        pass
    }

    /// What the controller observes this step: each machine through the provider and
    /// its endpoint, and the member list, alarms and cluster version from the leader.
    pub(crate) fn observe(&self) -> Observation {
        let sight = Sight {
            hidden: match &self.impairment {
                Some((Impairment::HiddenFromController(n), _)) => Some(n.as_str()),
                _ => None,
            },
            lagging: match &self.impairment {
                Some((Impairment::Lagging(id), _)) => Some(*id),
                _ => None,
            },
            in_use_bytes: self.space.in_use_bytes(),
            down_host: self.down_host(),
        };
        let mut obs = Observation {
            now_unix_s: self.now_unix_s(),
            compacted: self.space.nospace().then(|| self.space.compacted()),
            snapshots: self.snapshots.clone(),
            created_at_unix_s: Some(EPOCH_UNIX_S),
            fenced: self.fenced_dirs.clone(),
            hosts: self.observed_hosts(),
            ..Observation::default()
        };
        for mach in &self.machines {
            obs.machines
                .insert(mach.name.clone(), self.observe_machine(mach, &sight));
        }
        // The member list comes from the leader, if the controller can reach it.
        if self.leader_visible(sight.hidden) {
            obs.members = Some(self.member_list());
            // The leader's alarm list: every alarm, that of a removed member too.
            obs.alarms = self.space.alarms.iter().cloned().collect();
            obs.cluster_version = Some(self.cluster_version);
        }
        obs
    }

    /// What the provider and the endpoint of machine `mach` say of it.
    fn observe_machine(&self, mach: &Machine, sight: &Sight<'_>) -> MachineObservation {
        let p = self.procs.get(&mach.name).cloned().unwrap_or_default();
        // On a host that does not answer, the hosts provider reports its machines as
        // last seen, taken to run (`HostsProvider::observe`): etcd judges them.
        let silent = sight.down_host.is_some()
            && mach.placement.as_ref().map(|pl| pl.host.as_str()) == sight.down_host;
        let member = self.member_of_machine(&mach.name);
        let answers = self.responsive(&mach.name)
            && sight.hidden != Some(mach.name.as_str())
            && !self.publish_silent(&mach.name);
        let status = match member {
            Some(m) if answers => Some(self.endpoint_status(m, &p, sight)),
            _ => None,
        };
        // A linearizable read needs the leader's read index: a connected member of
        // a cluster with a leader. Not tried through a learner (it refuses them) or
        // a member that did not answer its status.
        let quorum_read = match (member, &status) {
            (Some(m), Some(_)) if !m.is_learner => {
                Some(self.member_connected(m) && self.leader.is_some())
            }
            _ => None,
        };
        MachineObservation {
            process: if p.running || silent {
                ProcessState::Running
            } else {
                ProcessState::Stopped
            },
            has_data: p.has_data,
            status,
            marker: p.marker,
            quorum_read,
            starts_unix_s: p.starts_unix_s.clone(),
            planned_starts_unix_s: p.planned_starts_unix_s.clone(),
            running_version: p.binary.filter(|_| p.running && !silent),
        }
    }

    /// The status the endpoint of member `m` (process `p`) answers.
    fn endpoint_status(&self, m: &SimMember, p: &Proc, sight: &Sight<'_>) -> EndpointStatus {
        EndpointStatus {
            member_id: m.id,
            leader_id: if self.member_connected(m) {
                self.leader.unwrap_or(0)
            } else {
                0
            },
            raft_term: self.term,
            raft_index: m.log,
            raft_applied_index: if sight.lagging == Some(m.id) {
                m.log.saturating_sub(repair::LAG_ENTRIES)
            } else {
                m.log
            },
            // What it runs, which is the record's version only once restarted.
            version: p.binary,
            is_learner: m.is_learner,
            alarms: self.space.alarms_of(m.id),
            cluster_id: repair::CLUSTER_ID,
            revision: self.space.revision,
            db_size_bytes: p.db_size_bytes.max(sight.in_use_bytes),
            db_size_in_use_bytes: sight.in_use_bytes,
        }
    }

    /// The controller reaches the leader: through its machine, unless that is hidden,
    /// or an orphan leader running outside quorum's machines.
    fn leader_visible(&self, hidden: Option<&str>) -> bool {
        self.leader.is_some_and(|l| {
            self.members
                .iter()
                .find(|m| m.id == l)
                .and_then(|m| self.machine_of_member(m))
                .is_some_and(|mach| hidden != Some(mach.name.as_str()))
                || self.external_running.contains(&l)
        })
    }

    /// The member list as the leader gives it (an unstarted member has no name and no
    /// client URL).
    fn member_list(&self) -> Vec<Member> {
        self.members
            .iter()
            .map(|m| Member {
                id: m.id,
                name: m.name.clone(),
                peer_urls: vec![m.peer_url.clone()],
                client_urls: if m.name.is_empty() {
                    vec![]
                } else {
                    vec![m.peer_url.replace("2380", "2379")]
                },
                is_learner: m.is_learner,
            })
            .collect()
    }
}

/// What the controller's sight of the machines depends on this step.
struct Sight<'a> {
    /// The machine whose endpoint is hidden from the controller, if any.
    hidden: Option<&'a str>,
    /// The member applying far behind its log, if any.
    lagging: Option<u64>,
    in_use_bytes: u64,
    /// The host that does not answer, if any.
    down_host: Option<&'a str>,
}
