//! Turning a builder graph into a flat [`Ir`]: dead-node removal, sharing of
//! common summand pairs between sums, binarization of sums and scheduling.

use std::collections::{BinaryHeap, HashMap};

use crate::error::Result;
use crate::ir::{Builder, GroupDecl, Instr, Ir, Node, NodeId, Out, Val};

type PairKey = (NodeId, NodeId, bool);

/// Sums longer than this are left out of summand-pair sharing (they are rare and
/// would make the pair table quadratic in their length).
const MAX_SUM_FOR_PAIRS: usize = 48;

fn pair_key(a: (NodeId, bool), b: (NodeId, bool)) -> PairKey {
    let (x, y) = if a.0 < b.0 { (a.0, b.0) } else { (b.0, a.0) };
    (x, y, a.1 ^ b.1)
}

fn has_duplicates(terms: &[(NodeId, bool)]) -> bool {
    let mut ids: Vec<NodeId> = terms.iter().map(|t| t.0).collect();
    ids.sort_unstable();
    ids.windows(2).any(|w| w[0] == w[1])
}

struct PairTable {
    count: HashMap<PairKey, usize>,
    holders: HashMap<PairKey, Vec<usize>>,
    heap: BinaryHeap<(usize, std::cmp::Reverse<PairKey>)>,
}

impl PairTable {
    fn inc(&mut self, p: PairKey, k: usize) {
        let e = self.count.entry(p).or_insert(0);
        *e += 1;
        self.holders.entry(p).or_default().push(k);
        if *e >= 2 {
            self.heap.push((*e, std::cmp::Reverse(p)));
        }
    }
    fn dec(&mut self, p: PairKey) {
        if let Some(e) = self.count.get_mut(&p) {
            *e = e.saturating_sub(1);
        }
    }
}

/// Greedily replaces the most frequent pair `±a ± b` of summands by a shared sum
/// node. Pair counts are updated incrementally (only the pairs touching the
/// replaced summands change), so the cost is linear in the sum length per rewrite.
fn share_pairs(nodes: &mut Vec<Node>, dedup_new: &mut HashMap<Node, NodeId>, sums: &[NodeId]) {
    let mut terms: Vec<Vec<(NodeId, bool)>> = Vec::new();
    let mut owner: Vec<NodeId> = Vec::new();
    for &s in sums {
        if let Node::Sum(t) = &nodes[s as usize] {
            if t.len() >= 3 && t.len() <= MAX_SUM_FOR_PAIRS && !has_duplicates(t) {
                terms.push(t.clone());
                owner.push(s);
            }
        }
    }
    let mut table = PairTable { count: HashMap::new(), holders: HashMap::new(), heap: BinaryHeap::new() };
    for (k, t) in terms.iter().enumerate() {
        for i in 0..t.len() {
            for j in i + 1..t.len() {
                let p = pair_key(t[i], t[j]);
                *table.count.entry(p).or_insert(0) += 1;
                table.holders.entry(p).or_default().push(k);
            }
        }
    }
    let mut heap: BinaryHeap<(usize, std::cmp::Reverse<PairKey>)> =
        table.count.iter().filter(|(_, &c)| c >= 2).map(|(&p, &c)| (c, std::cmp::Reverse(p))).collect();
    std::mem::swap(&mut table.heap, &mut heap);
    let mut tracked = vec![true; terms.len()];
    let mut changed = vec![false; terms.len()];
    while let Some((c, std::cmp::Reverse(p))) = table.heap.pop() {
        if table.count.get(&p).copied().unwrap_or(0) != c || c < 2 {
            continue;
        }
        let (a, b, rel) = p;
        let pair_node = Node::Sum(vec![(a, false), (b, rel)]);
        let sid = match dedup_new.get(&pair_node) {
            Some(&id) => id,
            None => {
                let id = nodes.len() as NodeId;
                nodes.push(pair_node.clone());
                dedup_new.insert(pair_node, id);
                id
            }
        };
        let mut list = table.holders.remove(&p).unwrap_or_default();
        list.sort_unstable();
        list.dedup();
        for k in list {
            if !tracked[k] {
                continue;
            }
            let t = &terms[k];
            let ia = t.iter().position(|&(x, _)| x == a);
            let ib = t.iter().position(|&(x, _)| x == b);
            let (Some(ia), Some(ib)) = (ia, ib) else { continue };
            if (t[ia].1 ^ t[ib].1) != rel {
                continue;
            }
            let (ta, tb) = (t[ia], t[ib]);
            let others: Vec<(NodeId, bool)> =
                t.iter().enumerate().filter(|(i, _)| *i != ia && *i != ib).map(|(_, x)| *x).collect();
            table.dec(p);
            for &x in &others {
                table.dec(pair_key(ta, x));
                table.dec(pair_key(tb, x));
            }
            let new_term = (sid, ta.1);
            let mut nt = others.clone();
            nt.push(new_term);
            nt.sort_unstable();
            if others.iter().any(|x| x.0 == sid) {
                // the shared node is already a summand: stop tracking this sum
                for i in 0..others.len() {
                    for j in i + 1..others.len() {
                        table.dec(pair_key(others[i], others[j]));
                    }
                }
                tracked[k] = false;
            } else {
                for &x in &others {
                    table.inc(pair_key(new_term, x), k);
                }
            }
            terms[k] = nt;
            changed[k] = true;
        }
        table.count.remove(&p);
    }
    for (k, t) in terms.into_iter().enumerate() {
        if changed[k] {
            nodes[owner[k] as usize] = Node::Sum(t);
        }
    }
}

/// Shares summand pairs among the sums reachable from `roots` (rewriting them in place).
fn share_live_pairs(nodes: &mut Vec<Node>, roots: &[NodeId]) {
    let live = mark(nodes, roots);
    let sums: Vec<NodeId> =
        (0..nodes.len() as NodeId).filter(|&i| live[i as usize] && matches!(nodes[i as usize], Node::Sum(_))).collect();
    let mut dedup_new: HashMap<Node, NodeId> = HashMap::new();
    for &s in &sums {
        dedup_new.insert(nodes[s as usize].clone(), s);
    }
    share_pairs(nodes, &mut dedup_new, &sums);
}

/// Operation count `(muls, adds, other)` that [`finish`] would reach for the
/// nodes reachable from `roots` with id at least `from`, after summand-pair sharing.
pub(crate) fn shared_cost(nodes: &[Node], roots: &[Val], from: usize) -> (usize, usize, usize) {
    let ids: Vec<NodeId> = roots
        .iter()
        .filter_map(|v| match v {
            Val::Ref { id, .. } => Some(*id),
            Val::Zero => None,
        })
        .collect();
    let mut nodes = nodes.to_vec();
    share_live_pairs(&mut nodes, &ids);
    let live = mark(&nodes, &ids);
    let mut c = (0, 0, 0);
    for (i, n) in nodes.iter().enumerate() {
        // pair nodes created by the sharing have ids past the original graph
        if live[i] && i >= from {
            let (m, a, o) = n.cost();
            c.0 += m;
            c.1 += a;
            c.2 += o;
        }
    }
    c
}

pub(crate) fn finish(b: Builder, name: &str) -> Result<Ir> {
    let (mut nodes, inputs, outputs) = b.parts();
    let roots: Vec<NodeId> = outputs
        .iter()
        .flat_map(|(_, v)| v.iter())
        .filter_map(|v| match v {
            Val::Ref { id, .. } => Some(*id),
            Val::Zero => None,
        })
        .collect();
    share_live_pairs(&mut nodes, &roots);

    // schedule: depth-first post-order from the outputs
    let mut index: Vec<Option<u32>> = vec![None; nodes.len()];
    let mut instrs: Vec<Instr> = Vec::new();
    for &r in &roots {
        emit(&nodes, r, &mut index, &mut instrs);
    }
    let results = outputs
        .iter()
        .map(|(_, vals)| {
            vals.iter()
                .map(|v| match v {
                    Val::Zero => Out::Zero,
                    Val::Ref { id, neg } => {
                        let i = index[*id as usize].expect("scheduled");
                        // a negated output whose instruction is a subtraction with no other
                        // users could be flipped; keep it simple and record the sign.
                        Out::Val { id: i, neg: *neg }
                    }
                })
                .collect()
        })
        .collect();
    let outputs: Vec<GroupDecl> = outputs.into_iter().map(|(g, _)| g).collect();
    Ok(Ir { name: name.to_string(), inputs, outputs, instrs, results })
}

fn mark(nodes: &[Node], roots: &[NodeId]) -> Vec<bool> {
    let mut live = vec![false; nodes.len()];
    let mut stack: Vec<NodeId> = roots.to_vec();
    while let Some(id) = stack.pop() {
        if live[id as usize] {
            continue;
        }
        live[id as usize] = true;
        stack.extend(nodes[id as usize].children());
    }
    live
}

fn emit(nodes: &[Node], root: NodeId, index: &mut [Option<u32>], instrs: &mut Vec<Instr>) {
    // iterative post-order
    let mut stack: Vec<(NodeId, bool)> = vec![(root, false)];
    while let Some((id, expanded)) = stack.pop() {
        if index[id as usize].is_some() {
            continue;
        }
        let node = &nodes[id as usize];
        if !expanded {
            stack.push((id, true));
            for c in node.children().into_iter().rev() {
                if index[c as usize].is_none() {
                    stack.push((c, false));
                }
            }
            continue;
        }
        let ix = |i: &NodeId| index[*i as usize].expect("child scheduled");
        let out = match node {
            Node::Input { group, index } => push(instrs, Instr::Input { group: *group, index: *index }),
            Node::Const(bits) => push(instrs, Instr::Const(f64::from_bits(*bits))),
            Node::Mul(a, b) => push(instrs, Instr::Mul(ix(a), ix(b))),
            Node::Div(a, b) => push(instrs, Instr::Div(ix(a), ix(b))),
            Node::Unary(op, a) => push(instrs, Instr::Unary(*op, ix(a))),
            Node::Neg(a) => push(instrs, Instr::Neg(ix(a))),
            Node::Sum(t) => {
                // start from a positive term so that no negation is needed
                let mut order: Vec<(NodeId, bool)> = t.clone();
                if let Some(p) = order.iter().position(|x| !x.1) {
                    let first = order.remove(p);
                    order.insert(0, first);
                    let mut acc = ix(&order[0].0);
                    for (c, neg) in &order[1..] {
                        acc = push(instrs, if *neg { Instr::Sub(acc, ix(c)) } else { Instr::Add(acc, ix(c)) });
                    }
                    acc
                } else {
                    // all terms negative: -(a + b + ...) = ((-a) - b) - ...
                    let n = push(instrs, Instr::Neg(ix(&order[0].0)));
                    let mut acc = n;
                    for (c, _) in &order[1..] {
                        acc = push(instrs, Instr::Sub(acc, ix(c)));
                    }
                    acc
                }
            }
        };
        index[id as usize] = Some(out);
    }
}

fn push(instrs: &mut Vec<Instr>, i: Instr) -> u32 {
    instrs.push(i);
    (instrs.len() - 1) as u32
}
