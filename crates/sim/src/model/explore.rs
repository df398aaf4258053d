//! The explorer: every reachable state, breadth first and deduplicated, the safety
//! properties in each, and liveness over the explicit state graph.

use super::perform::successors;
use super::*;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Explores every reachable state from `initial(variant)`.
pub fn check(variant: Variant) -> Report {
    let mut graph = Graph::new(initial(variant));
    let mut violations = graph.explore();
    // Liveness: terminal states are goals, and a goal is reachable from every state.
    let goal: Vec<bool> = graph.states.iter().map(State::goal).collect();
    if violations.is_empty() {
        violations.extend(graph.stuck(&goal));
    }
    if violations.is_empty() {
        violations.extend(graph.unfinishable(&goal));
    }
    graph.report(&goal, violations)
}

/// The reachable states found so far and the steps between them.
struct Graph {
    /// States by their hash (the states themselves are kept once, in `states`).
    index: HashMap<u64, Vec<usize>, BuildHasherDefault<FxHasher>>,
    states: Vec<State>,
    /// Each state's successors (itself left out).
    edges: Vec<Vec<usize>>,
    /// How many steps from the initial state each state was first reached.
    depth: Vec<usize>,
    /// The state each was first reached from, and by which step.
    parent: Vec<Option<(usize, String)>>,
    transitions: usize,
}

impl Graph {
    fn new(start: State) -> Graph {
        let mut index: HashMap<u64, Vec<usize>, BuildHasherDefault<FxHasher>> = HashMap::default();
        index.insert(fx_hash(&start), vec![0]);
        Graph {
            index,
            states: vec![start],
            edges: vec![vec![]],
            depth: vec![0],
            parent: vec![None],
            transitions: 0,
        }
    }

    /// Explores breadth first from the initial state, checking the safety properties
    /// in each state; the first violation stops it.
    fn explore(&mut self) -> Vec<String> {
        let mut queue = VecDeque::from([0]);
        while let Some(i) = queue.pop_front() {
            if let Err(violation) = self.expand(i, &mut queue) {
                return vec![violation];
            }
        }
        Vec::new()
    }

    /// Checks state `i` and adds its successors (queueing those not seen before).
    fn expand(&mut self, i: usize, queue: &mut VecDeque<usize>) -> Result<(), String> {
        let after = |e: String, parent: &[Option<(usize, String)>]| {
            format!("{e}, after: {}", path_to(parent, i))
        };
        if let Err(e) = self.states[i].check() {
            return Err(after(e, &self.parent));
        }
        let next = match successors(&self.states[i]) {
            Ok(n) => n,
            Err(e) => return Err(after(e, &self.parent)),
        };
        for (label, n) in next {
            self.transitions += 1;
            let j = self.add(i, label, n, queue)?;
            if j != i {
                self.edges[i].push(j);
            }
        }
        Ok(())
    }

    /// The index of state `n`, reached from state `i` by step `label`: a new state is
    /// kept and queued, up to `MAX_STATES`.
    fn add(
        &mut self,
        i: usize,
        label: String,
        n: State,
        queue: &mut VecDeque<usize>,
    ) -> Result<usize, String> {
        let h = fx_hash(&n);
        let seen = self
            .index
            .get(&h)
            .and_then(|js| js.iter().copied().find(|j| self.states[*j] == n));
        if let Some(j) = seen {
            return Ok(j);
        }
        let j = self.states.len();
        if j >= MAX_STATES {
            return Err(format!(
                "more than {MAX_STATES} states: the model is unbounded"
            ));
        }
        self.index.entry(h).or_default().push(j);
        self.states.push(n);
        self.parent.push(Some((i, label)));
        self.edges.push(vec![]);
        self.depth.push(self.depth[i] + 1);
        queue.push_back(j);
        Ok(j)
    }

    /// A terminal state that is no goal, if there is one.
    fn stuck(&self, goal: &[bool]) -> Option<String> {
        (0..self.states.len())
            .find(|&i| self.edges[i].is_empty() && !goal[i])
            .map(|i| {
                format!(
                    "stuck (no next step, not upgraded), after: {}",
                    path_to(&self.parent, i)
                )
            })
    }

    /// A state from which no goal can be reached, if there is one (found by walking
    /// the steps backwards from every goal).
    fn unfinishable(&self, goal: &[bool]) -> Option<String> {
        let mut reverse: Vec<Vec<usize>> = vec![vec![]; self.states.len()];
        for (i, es) in self.edges.iter().enumerate() {
            for &j in es {
                reverse[j].push(i);
            }
        }
        let mut reaches = goal.to_vec();
        let mut q: VecDeque<usize> = (0..self.states.len()).filter(|&i| goal[i]).collect();
        while let Some(j) = q.pop_front() {
            for &i in &reverse[j] {
                if !reaches[i] {
                    reaches[i] = true;
                    q.push_back(i);
                }
            }
        }
        (0..self.states.len())
            .find(|&i| !reaches[i])
            .map(|i| format!("no way to finish, after: {}", path_to(&self.parent, i)))
    }

    /// The report of the exploration: its size, and how many states reached each part
    /// of the model (so a variant that never got there shows).
    fn report(&self, goal: &[bool], violations: Vec<String>) -> Report {
        let states = &self.states;
        let count = |f: &dyn Fn(&State) -> bool| states.iter().filter(|s| f(s)).count();
        Report {
            states: states.len(),
            transitions: self.transitions,
            max_depth: self.depth.iter().copied().max().unwrap_or(0),
            goal_states: goal.iter().filter(|g| **g).count(),
            disk_lost_states: count(&|s| s.disk_lost),
            remediation_states: count(&|s| s.machines.iter().any(|m| m.remediation.is_some())),
            in_place_states: count(&|s| s.machines.iter().any(|m| m.in_place.is_some())),
            rollback_states: count(&|s| {
                s.machines.iter().any(|m| {
                    m.in_place
                        .as_ref()
                        .is_some_and(|ip| ip.phase >= quorum_core::InPlacePhase::RollingBack)
                })
            }),
            bad_binary_states: count(&|s| s.bad_binary.is_some()),
            ca_last_phase_states: count(&|s| {
                s.cp.ca_rotation
                    .as_ref()
                    .is_some_and(|r| r.phase == CaPhase::Drop)
            }),
            lost_publish_states: count(&|s| s.publish.is_some()),
            publish_stopped_states: count(&|s| s.publish_stopped()),
            violations,
        }
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
