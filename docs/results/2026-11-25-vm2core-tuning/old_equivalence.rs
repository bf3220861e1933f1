// Temporary: the old runtime/src/tune.rs choice against the new tuner, over a grid.
use oxccl_tuning::{Algorithm, Collective, HostModel, Model, Request, Selection, Tuner};

fn old_estimate(nranks: usize, net: bool, over: bool, c: Collective, a: Algorithm, bytes: usize) -> f64 {
    let (mut hop, issue, bandwidth): (f64, f64, f64) = if net { (15e-6, 2e-6, 0.8e9) } else { (0.15e-6, 0.05e-6, 6e9) };
    if over { hop = hop.max(5e-6); }
    let reduce_rate = 4e9;
    let n = nranks.max(1) as f64;
    let s = bytes as f64;
    let log2 = (usize::BITS - nranks.saturating_sub(1).leading_zeros()).max(1) as f64;
    let parallel = if net { (n - 1.0).clamp(1.0, 2.0) } else { 0.5 };
    let (hops, messages, moved, reduced) = match (c, a) {
        (Collective::AllReduce, Algorithm::Ring) => (2.0 * (n - 1.0), 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s, (n - 1.0) / n * s),
        (Collective::AllReduce, Algorithm::Tree) => (2.0 * log2, 4.0 * log2, 2.0 * s, s),
        (Collective::AllReduce, Algorithm::Direct) if nranks == 2 => (1.0, 1.0, s, s),
        (Collective::AllReduce, Algorithm::Direct) => (2.0, 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s / parallel, (n - 1.0) / n * s),
        (_, Algorithm::Direct) => (1.0, n - 1.0, (n - 1.0) / n * s, 0.0),
        _ => (n - 1.0, n - 1.0, s, 0.0),
    };
    hops * hop + messages * issue + moved / bandwidth + reduced / reduce_rate
}

fn old_choose(nranks: usize, net: bool, over: bool, c: Collective, bytes: usize) -> Algorithm {
    let pref: &[Algorithm] = match c {
        Collective::AllToAll | Collective::Gather | Collective::Scatter => &[Algorithm::Direct, Algorithm::Ring],
        Collective::AllReduce => &[Algorithm::Ring, Algorithm::Tree, Algorithm::Direct],
        _ => &[Algorithm::Ring],
    };
    *pref.iter().min_by(|a, b| old_estimate(nranks, net, over, c, **a, bytes).total_cmp(&old_estimate(nranks, net, over, c, **b, bytes))).unwrap()
}

#[test]
fn grid() {
    let (mut total, mut differ) = (0, Vec::new());
    for nranks in 2..=64 {
        for net in [false, true] {
            for over in [false, true] {
                let t = Tuner::new(Selection::default(), Model::Host(HostModel { nranks, net, oversubscribed: over }), HostModel::runs, None);
                for c in Collective::ALL {
                    for esize in [1usize, 4] {
                        let mut count = 1usize;
                        while count <= (1 << 30) / esize {
                            for k in [count, count * 3 / 2] {
                                if k == 0 { continue; }
                                let new = t.choose(&Request::new(c, c.tuning_bytes(k, esize, nranks))).unwrap().algorithm;
                                let old = old_choose(nranks, net, over, c, k * esize);
                                total += 1;
                                if new != old { differ.push((nranks, net, over, c, k * esize, old, new)); }
                            }
                            count *= 2;
                        }
                    }
                }
            }
        }
    }
    println!("{total} cases, {} differ", differ.len());
    for d in differ.iter().take(40) { println!("{d:?}"); }
}
