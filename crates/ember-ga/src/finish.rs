//! Turning a builder graph into a flat [`Ir`]: dead-node removal, sharing of
//! common summand pairs between sums, binarization of sums and scheduling.

use std::collections::{BinaryHeap, HashMap};

use crate::error::Result;
use crate::ir::{Builder, GroupDecl, Instr, Ir, Node, NodeId, Out, Val};

type PairKey = (NodeId, NodeId, bool);

/// Sums longer than this are left out of summand-pair sharing (they are rare and
/// would make the pair table quadratic in their length).
const MAX_SUM_FOR_PAIRS: usize = 48;

fn pairs_of(terms: &[(NodeId, bool)]) -> Vec<PairKey> {
    let mut v = Vec::new();
    for i in 0..terms.len() {
        for j in i + 1..terms.len() {
            let (a, sa) = terms[i];
            let (b, sb) = terms[j];
            if a != b {
                let (x, y) = if a < b { (a, b) } else { (b, a) };
                v.push((x, y, sa ^ sb));
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Greedily replaces the most frequent pair `±a ± b` of summands by a shared sum node.
fn share_pairs(nodes: &mut Vec<Node>, dedup_new: &mut HashMap<Node, NodeId>, sums: &[NodeId]) {
    let mut terms: Vec<Vec<(NodeId, bool)>> = Vec::new();
    let mut owner: Vec<NodeId> = Vec::new();
    for &s in sums {
        if let Node::Sum(t) = &nodes[s as usize] {
            if t.len() >= 3 && t.len() <= MAX_SUM_FOR_PAIRS {
                terms.push(t.clone());
                owner.push(s);
            }
        }
    }
    let mut count: HashMap<PairKey, usize> = HashMap::new();
    let mut holders: HashMap<PairKey, Vec<usize>> = HashMap::new();
    for (k, t) in terms.iter().enumerate() {
        for p in pairs_of(t) {
            *count.entry(p).or_insert(0) += 1;
            holders.entry(p).or_default().push(k);
        }
    }
    let mut heap: BinaryHeap<(usize, std::cmp::Reverse<PairKey>)> =
        count.iter().filter(|(_, &c)| c >= 2).map(|(&p, &c)| (c, std::cmp::Reverse(p))).collect();
    let mut changed = vec![false; terms.len()];
    while let Some((c, std::cmp::Reverse(p))) = heap.pop() {
        if count.get(&p).copied().unwrap_or(0) != c || c < 2 {
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
        let list = holders.get(&p).cloned().unwrap_or_default();
        for k in list {
            let t = &terms[k];
            let ia = t.iter().position(|&(x, _)| x == a);
            let ib = t.iter().position(|&(x, _)| x == b);
            let (Some(ia), Some(ib)) = (ia, ib) else { continue };
            if (t[ia].1 ^ t[ib].1) != rel {
                continue;
            }
            for q in pairs_of(t) {
                if let Some(e) = count.get_mut(&q) {
                    *e -= 1;
                }
            }
            let sign = t[ia].1;
            let mut nt: Vec<(NodeId, bool)> =
                t.iter().enumerate().filter(|(i, _)| *i != ia && *i != ib).map(|(_, x)| *x).collect();
            nt.push((sid, sign));
            nt.sort_unstable();
            for q in pairs_of(&nt) {
                let e = count.entry(q).or_insert(0);
                *e += 1;
                holders.entry(q).or_default().push(k);
                if *e >= 2 {
                    heap.push((*e, std::cmp::Reverse(q)));
                }
            }
            terms[k] = nt;
            changed[k] = true;
        }
        count.remove(&p);
    }
    for (k, t) in terms.into_iter().enumerate() {
        if changed[k] {
            // Keep the first term positive by construction: a sum whose first
            // summand became negative is emitted as `b - a` chains by `binarize`.
            nodes[owner[k] as usize] = Node::Sum(t);
        }
    }
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
    // live sums
    let live = mark(&nodes, &roots);
    let sums: Vec<NodeId> =
        (0..nodes.len() as NodeId).filter(|&i| live[i as usize] && matches!(nodes[i as usize], Node::Sum(_))).collect();
    let mut dedup_new: HashMap<Node, NodeId> = HashMap::new();
    for &s in &sums {
        dedup_new.insert(nodes[s as usize].clone(), s);
    }
    share_pairs(&mut nodes, &mut dedup_new, &sums);

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
