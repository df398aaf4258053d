//! The explorer: every reachable state, breadth first and deduplicated, the safety
//! properties in each, and liveness over the explicit state graph.

use super::perform::successors;
use super::*;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Explores every reachable state from `initial(variant)`.
pub fn check(variant: Variant) -> Report {
    let start = initial(variant);
    // States by their hash (the states themselves are kept once, in `states`).
    let mut index: HashMap<u64, Vec<usize>, BuildHasherDefault<FxHasher>> = HashMap::default();
    let mut states: Vec<State> = Vec::new();
    let mut edges: Vec<Vec<usize>> = Vec::new();
    let mut depth: Vec<usize> = Vec::new();
    let mut parent: Vec<Option<(usize, String)>> = vec![None];
    let mut queue = VecDeque::new();
    let mut violations = Vec::new();
    index.insert(fx_hash(&start), vec![0]);
    states.push(start);
    edges.push(vec![]);
    depth.push(0);
    queue.push_back(0);
    let mut transitions = 0;
    while let Some(i) = queue.pop_front() {
        if let Err(e) = states[i].check() {
            violations.push(format!("{e}, after: {}", path_to(&parent, i)));
            break;
        }
        let next = match successors(&states[i]) {
            Ok(n) => n,
            Err(e) => {
                violations.push(format!("{e}, after: {}", path_to(&parent, i)));
                break;
            }
        };
        for (label, n) in next {
            transitions += 1;
            let h = fx_hash(&n);
            let seen = index
                .get(&h)
                .and_then(|js| js.iter().copied().find(|j| states[*j] == n));
            let j = match seen {
                Some(j) => j,
                None => {
                    let j = states.len();
                    if j >= MAX_STATES {
                        violations.push(format!(
                            "more than {MAX_STATES} states: the model is unbounded"
                        ));
                        break;
                    }
                    index.entry(h).or_default().push(j);
                    states.push(n);
                    parent.push(Some((i, label)));
                    edges.push(vec![]);
                    depth.push(depth[i] + 1);
                    queue.push_back(j);
                    j
                }
            };
            if j != i {
                edges[i].push(j);
            }
        }
        if !violations.is_empty() {
            break;
        }
    }
    // Liveness: terminal states are goals, and a goal is reachable from every state.
    let goal: Vec<bool> = states.iter().map(State::goal).collect();
    if violations.is_empty() {
        for (i, s) in states.iter().enumerate() {
            if edges[i].is_empty() && !goal[i] {
                let _ = s;
                violations.push(format!(
                    "stuck (no next step, not upgraded), after: {}",
                    path_to(&parent, i)
                ));
                break;
            }
        }
    }
    if violations.is_empty() {
        let mut reverse: Vec<Vec<usize>> = vec![vec![]; states.len()];
        for (i, es) in edges.iter().enumerate() {
            for &j in es {
                reverse[j].push(i);
            }
        }
        let mut reaches = goal.clone();
        let mut q: VecDeque<usize> = (0..states.len()).filter(|&i| goal[i]).collect();
        while let Some(j) = q.pop_front() {
            for &i in &reverse[j] {
                if !reaches[i] {
                    reaches[i] = true;
                    q.push_back(i);
                }
            }
        }
        if let Some(i) = (0..states.len()).find(|&i| !reaches[i]) {
            violations.push(format!("no way to finish, after: {}", path_to(&parent, i)));
        }
    }
    Report {
        states: states.len(),
        transitions,
        max_depth: depth.iter().copied().max().unwrap_or(0),
        goal_states: goal.iter().filter(|g| **g).count(),
        disk_lost_states: states.iter().filter(|s| s.disk_lost).count(),
        remediation_states: states
            .iter()
            .filter(|s| s.machines.iter().any(|m| m.remediation.is_some()))
            .count(),
        in_place_states: states
            .iter()
            .filter(|s| s.machines.iter().any(|m| m.in_place.is_some()))
            .count(),
        rollback_states: states
            .iter()
            .filter(|s| {
                s.machines.iter().any(|m| {
                    m.in_place
                        .as_ref()
                        .is_some_and(|ip| ip.phase >= quorum_core::InPlacePhase::RollingBack)
                })
            })
            .count(),
        bad_binary_states: states.iter().filter(|s| s.bad_binary.is_some()).count(),
        ca_last_phase_states: states
            .iter()
            .filter(|s| {
                s.cp.ca_rotation
                    .as_ref()
                    .is_some_and(|r| r.phase == CaPhase::Drop)
            })
            .count(),
        lost_publish_states: states.iter().filter(|s| s.publish.is_some()).count(),
        publish_stopped_states: states.iter().filter(|s| s.publish_stopped()).count(),
        violations,
    }
}

/// FxHash (rustc's): the explored states are hashed millions of times, and SipHash's
/// resistance to chosen keys buys nothing here.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for b in chunks.remainder() {
            self.add(u64::from(*b));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

fn fx_hash(s: &State) -> u64 {
    let mut h = FxHasher::default();
    s.hash(&mut h);
    h.finish()
}

/// The steps from the initial state to state `i`.
fn path_to(parent: &[Option<(usize, String)>], mut i: usize) -> String {
    let mut steps = Vec::new();
    while let Some((p, label)) = &parent[i] {
        steps.push(label.clone());
        i = *p;
    }
    steps.reverse();
    steps.join(" -> ")
}
