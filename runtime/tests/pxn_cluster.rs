//! PXN on a simulated rail-optimized cluster: 4 hosts (network namespaces) × 2 ranks,
//! two rails (a bridge each) joined only by a slow spine (a router namespace whose links
//! have a rate). Rank `2h + i` runs in host `h` and is given the NIC of rail `i` alone
//! (NCCL_SOCKET_IFNAME), as ranks of a rail-optimized host each own a NIC.
//!
//! With PXN, a rank's data for a rank on the other rail leaves by the NIC of its host's
//! rank on that rail, whose proxy reads it from shared memory; without, it crosses the
//! spine. The tests check where every connection went (each rank reports its
//! `net_connections`), run every collective and alltoall checked, both ways; count the
//! receives posted together (OXCCL_SOCKET_MAX_RECVS 1 vs 8: with 8, a relaying rank's own
//! messages and those it relays share a comm, and their receives are posted together);
//! and kill a rank while it
//! relays its host mate's traffic mid-alltoall: every survivor fails naming it, shrinks
//! it out and goes on (alltoall checked on the survivors).

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator, NetConnection};
use oxccl_testkit::check as matrix;
use oxccl_testkit::cluster::{mpirun, Cluster, Spec};

const HOSTS: usize = 4;
const RANKS_PER_HOST: usize = 2;
const NRANKS: usize = HOSTS * RANKS_PER_HOST;
/// The spine's rate: slower than the rails (veth, unlimited).
const SPINE_MBPS: u64 = 400;
/// A job's bound: a hang fails the test.
const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// One rank (does nothing when run as an ordinary test): OXCCL_TEST_PXN says what to run.
#[test]
fn child() {
    let Ok(mode) = std::env::var("OXCCL_TEST_PXN") else { return };
    if std::env::var_os("OXCCL_TEST_PIN_LOCAL").is_some() {
        pin_to_cpu(std::env::var("OXCCL_LOCAL_RANK").unwrap().parse().unwrap());
    }
    let config = Config::from_env().unwrap();
    oxccl_runtime::bootstrap::log::init(&config);
    let comm = Communicator::from_env(&config).unwrap_or_else(|e| panic!("joining the job: {e}"));
    match mode.as_str() {
        "matrix" => {
            let start = Instant::now();
            let failures = matrix::run_cases(&comm, &matrix::full_matrix(comm.nranks(), &matrix::SMALL_COUNTS));
            assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
            let matrix_time = start.elapsed();
            exchange(&comm);
            report(&comm);
            println!("rank {}: matrix ok in {matrix_time:?}, exchange ok", comm.rank());
        }
        "exchange" => {
            exchange(&comm);
            report(&comm);
            println!("rank {}: exchange ok", comm.rank());
            // Every rank relays for its host mate, whose parting it waits for: ranks leave
            // while others still tear down, and each must say goodbye, not be taken for a
            // death (the test reads their logs; without the goodbye 4 runs in 4 showed it).
        }
        "idle" => idle_then_woken(&comm),
        "kill" => alltoall_until_failure(comm),
        "bench" => bench_rows(&comm),
        other => panic!("OXCCL_TEST_PXN={other}"),
    }
}

/// Binds this process to CPU `cpu` (as a launcher binding a rank to a socket would).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes within it; pid 0 is this thread,
    // before any other starts.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0, "binding to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
}

/// A grouped send/recv with every peer, then alltoalls, checked: independent messages,
/// whose receives may be posted together.
fn exchange(comm: &Communicator) {
    let (n, r) = (comm.nranks(), comm.rank());
    let len = 50_000;
    let outs: Vec<Vec<u32>> = (0..n).map(|p| (0..len).map(|i| (r * 1_000_000 + p * 100_000 + i) as u32).collect()).collect();
    let mut ins: Vec<Vec<u32>> = vec![vec![0; len]; n];
    let mut group = comm.group();
    for (p, buf) in ins.iter_mut().enumerate().filter(|(p, _)| *p != r) {
        group.recv(buf, p).unwrap();
    }
    for (p, buf) in outs.iter().enumerate().filter(|(p, _)| *p != r) {
        group.send(buf, p).unwrap();
    }
    group.end().unwrap();
    for (p, buf) in ins.iter().enumerate().filter(|(p, _)| *p != r) {
        assert!(buf.iter().enumerate().all(|(i, &x)| x == (p * 1_000_000 + r * 100_000 + i) as u32), "rank {r}: data from {p}");
    }
    checked_alltoall(comm, len, 0);
}

/// An alltoall of `len` elements per peer whose values depend on `round`, checked.
fn checked_alltoall(comm: &Communicator, len: usize, round: u64) {
    let (n, r) = (comm.nranks(), comm.rank());
    let value = |from: usize, to: usize, i: usize| ((from * n + to) * len + i) as u64 ^ (round << 40);
    let send: Vec<u64> = (0..n).flat_map(|to| (0..len).map(move |i| value(r, to, i))).collect();
    let mut recv = vec![0u64; n * len];
    comm.all_to_all(&send, &mut recv).unwrap_or_else(|e| panic!("rank {r} round {round}: {e}"));
    for from in 0..n {
        for i in 0..len {
            assert_eq!(recv[from * len + i], value(from, r, i), "rank {r} round {round}: alltoall from {from}");
        }
    }
}

/// After the exchange (every relay made), what this rank's proxy thread does idle — it
/// sleeps, the relays' too — then 10 rounds, each after 50 ms idle, of a small message from
/// rank 0 (host 0, rail 0) to rank 3 (host 1, rail 1), which rank 1's proxy relays while
/// rank 1 itself takes part in no call. Rank 3 posts its receive 20 ms before rank 0 sends,
/// so the receive's notice (which reaches rank 1's proxy over its socket) has come and
/// gone: only the origin's post can wake that thread then (without a doorbell it sleeps
/// up to 100 ms). Prints `IDLE switches=<voluntary context switches of its proxy thread in
/// 500 ms> late_ms=<rank 3's receives beyond the 20 ms, in all>`.
fn idle_then_woken(comm: &Communicator) {
    exchange(comm);
    let barrier = |c: &Communicator| {
        let mut x = [1u32];
        c.all_reduce_in_place(&mut x, oxccl_runtime::ReduceOp::Sum).unwrap();
    };
    barrier(comm);
    let switches = common::proxy_threads_idle().0;
    barrier(comm);
    let mut times = Vec::new();
    for round in 0..10u64 {
        std::thread::sleep(Duration::from_millis(50));
        let message: Vec<u64> = (0..16).map(|i| round * 100 + i).collect();
        match comm.rank() {
            0 => {
                std::thread::sleep(Duration::from_millis(20));
                comm.send(&message, 3).unwrap();
            }
            3 => {
                let start = Instant::now();
                let mut got = vec![0u64; 16];
                comm.recv(&mut got, 0).unwrap();
                times.push(start.elapsed().saturating_sub(Duration::from_millis(20)));
                assert_eq!(got, message, "round {round}");
            }
            _ => {}
        }
    }
    barrier(comm);
    let late = times.iter().sum::<Duration>().as_secs_f64() * 1e3;
    println!("IDLE switches={switches} late_ms={late:.3}");
    println!("rank {}: idle ok", comm.rank());
}

/// Prints this rank's connections and receive counters, for the test to read.
fn report(comm: &Communicator) {
    for NetConnection { from, to, channel, proxy, send, device, nic } in comm.net_connections() {
        println!("CONN from={from} to={to} channel={channel} proxy={proxy} send={send} device={device} nic={nic}");
    }
    let (calls, grouped) = comm.net_receive_stats();
    println!("RECVS calls={calls} grouped={grouped} across={}", comm.net_receives_across_links());
}

/// Alltoalls until one fails; rank 1 (which relays rank 0's traffic to rail 1) dies at
/// round 10. A survivor prints whom its error named, shrinks that rank out, checks an
/// alltoall on the survivors and exits 5.
fn alltoall_until_failure(comm: Communicator) {
    let victim = 1;
    for round in 0u64.. {
        if comm.rank() == victim && round == 10 {
            // SAFETY: kill(2) of this very process touches no memory; dying here, without
            // a goodbye, is the point.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let (n, r) = (comm.nranks(), comm.rank());
        let len = 20_000;
        let send: Vec<u64> = vec![(r * n) as u64 + round; n * len];
        let mut recv = vec![0u64; n * len];
        if let Err(e) = comm.all_to_all(&send, &mut recv) {
            let oxccl_runtime::Error::PeerFailed { rank: dead, .. } = e else { panic!("rank {r}: not a peer failure: {e}") };
            println!("rank {r} round {round}: failed naming rank {dead}: {e}");
            let survivors = comm.shrink(&[dead as usize], true).unwrap_or_else(|e| panic!("rank {r}: shrink: {e}"));
            for round in 0..3 {
                checked_alltoall(&survivors, 10_000, round);
            }
            report(&survivors);
            println!("rank {r} now rank {} of {}: alltoall checked", survivors.rank(), survivors.nranks());
            drop(survivors);
            drop(comm);
            std::process::exit(5);
        }
    }
}

/// The benchmark's rows: alltoall and all_gather, busbw per size.
fn bench_rows(comm: &Communicator) {
    let n = comm.nranks();
    for bytes in [1usize << 16, 1 << 20, 4 << 20, 16 << 20] {
        let count = bytes / 8;
        for (name, per_rank) in [("alltoall", count / n), ("all_gather", count / n)] {
            let send = vec![1u64; if name == "alltoall" { per_rank * n } else { per_rank }];
            let mut recv = vec![0u64; per_rank * n];
            let run = |recv: &mut [u64]| if name == "alltoall" { comm.all_to_all(&send, recv) } else { comm.all_gather(&send, recv) };
            run(&mut recv).unwrap();
            let iterations = 5;
            comm.barrier().unwrap();
            let start = Instant::now();
            for _ in 0..iterations {
                run(&mut recv).unwrap();
            }
            let seconds = start.elapsed().as_secs_f64() / iterations as f64;
            let size = per_rank * n * 8;
            let busbw = size as f64 / seconds / 1e9 * (n - 1) as f64 / n as f64;
            if comm.rank() == 0 {
                println!("BENCH {name} {size} {:.1} {busbw:.3}", seconds * 1e6);
            }
        }
    }
    let (calls, grouped) = comm.net_receive_stats();
    if comm.rank() == 0 {
        println!("RECVS calls={calls} grouped={grouped}");
    }
}

/// Runs `mode` on every rank of `cluster` with `env`; each rank's output.
fn job(cluster: &Cluster, mode: &str, env: &[(&str, &str)], port: u16) -> Vec<Output> {
    let root = format!("{}:{port}", cluster.hosts[0].address(0));
    std::thread::scope(|s| {
        let ranks: Vec<_> = (0..NRANKS)
            .map(|rank| {
                let host = &cluster.hosts[rank / RANKS_PER_HOST];
                let mut command = host.command_on_rail(std::env::current_exe().unwrap(), rank % RANKS_PER_HOST);
                command
                    .args(["child", "--exact", "--nocapture", "--test-threads", "1"])
                    .env("OXCCL_TEST_PXN", mode)
                    .env("OXCCL_RANK", rank.to_string())
                    .env("OXCCL_NRANKS", NRANKS.to_string())
                    .env("OXCCL_LOCAL_RANK", (rank % RANKS_PER_HOST).to_string())
                    .env("NCCL_COMM_ID", &root)
                    .env("NCCL_NET_PLUGIN", "none")
                    .env("OXCCL_COLL_TIMEOUT_MS", "60000")
                    // One proxy thread a rank: 8 ranks share this machine's cores.
                    .env("OXCCL_PROXY_THREADS", "1")
                    .envs(env.iter().copied());
                s.spawn(move || oxccl_testkit::run(command, JOB_TIMEOUT))
            })
            .collect();
        ranks.into_iter().map(|rank| rank.join().unwrap()).collect()
    })
}

/// Asserts every rank exited with `code` and printed `marker`; the ranks' stdouts. A
/// failure names every rank that did not, each with the end of its output (the rank that
/// failed first is among them, not only the first survivor that heard of it).
fn expect(outputs: &[Output], code: i32, marker: &str, skip: Option<usize>) -> Vec<String> {
    let mut stdouts = Vec::new();
    let mut failed = Vec::new();
    for (rank, output) in outputs.iter().enumerate() {
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr));
        if Some(rank) != skip && !(output.status.code() == Some(code) && stdout.contains(marker)) {
            let tail = |text: &str| {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(25)..].join("\n")
            };
            failed.push(format!("rank {rank}: {} (expected exit {code} and {marker:?})\n{}\n{}", output.status, tail(&stdout), tail(&stderr)));
        }
        stdouts.push(stdout);
    }
    assert!(failed.is_empty(), "{} rank(s) failed:\n{}", failed.len(), failed.join("\n----\n"));
    stdouts
}

/// The value of `name=` in a reported line.
fn field(line: &str, name: &str) -> String {
    line.split(' ').find_map(|f| f.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("{name} in {line}")).to_string()
}

/// Each reported connection of rank `rank`'s stdout, parsed.
fn connections(stdout: &str) -> Vec<NetConnection> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("CONN "))
        .map(|line| {
            let field = |name: &str| field(line, name);
            let number = |name: &str| field(name).parse::<usize>().unwrap();
            NetConnection { from: number("from"), to: number("to"), channel: number("channel"), proxy: number("proxy"), send: field("send") == "true", device: number("device"), nic: field("nic") }
        })
        .collect()
}

/// The receive counters a rank reported: (irecv calls, grouped ones).
/// A rank's receive counts: (irecv calls, calls of several buffers, calls for several ranks).
fn receives(stdout: &str) -> (u64, u64, u64) {
    let line = stdout.lines().find_map(|l| l.strip_prefix("RECVS ")).expect("a RECVS line");
    let number = |name: &str| field(line, name).parse::<u64>().unwrap_or_else(|e| panic!("{name} in {line}: {e}"));
    (number("calls"), number("grouped"), number("across"))
}

fn rail_of(rank: usize) -> usize {
    rank % RANKS_PER_HOST
}

fn same_host(a: usize, b: usize) -> bool {
    a / RANKS_PER_HOST == b / RANKS_PER_HOST
}

fn cluster() -> Option<Cluster> {
    Cluster::or_skip(&Spec::new(HOSTS, 2).spine(Some(SPINE_MBPS)))
}

/// Idle, a relaying rank's proxy thread sleeps: its relays' origins (host mates, other
/// processes) ring their FIFOs' doorbells when they post, as the rank's own executor wakes
/// it. Before, a relaying thread napped 50 µs for good; and one that slept without being
/// rung would hold each relayed message up to 100 ms.
#[test]
fn relaying_proxy_threads_sleep_when_idle_and_wake_for_relayed_sends() {
    let Some(cluster) = cluster() else { return };
    if !oxccl_transports::futex::wait_any_supported() {
        eprintln!("futex_waitv is unavailable here (Linux before 5.16, or a seccomp filter): relaying threads poll; skipped");
        return;
    }
    let outputs = job(&cluster, "idle", &[("OXCCL_SOCKET_MAX_RECVS", "8")], 29616);
    let stdouts = expect(&outputs, 0, "idle ok", None);
    for (rank, stdout) in stdouts.iter().enumerate() {
        let line = stdout.lines().find_map(|l| l.split_once("IDLE ").map(|(_, rest)| rest)).unwrap_or_else(|| panic!("rank {rank}: no IDLE line:\n{stdout}"));
        let switches: u64 = field(line, "switches").parse().unwrap();
        let late: f64 = field(line, "late_ms").parse().unwrap();
        assert!(switches <= 40, "rank {rank}: its proxy thread switched {switches} times in 500 ms idle");
        if rank == 3 {
            // Unwoken, the relaying thread holds each message for what is left of its
            // 100 ms sleep.
            assert!(late < 60.0, "10 small messages relayed by an idle rank's proxy arrived {late} ms late in all: the relaying thread slept through its origin's posts");
        }
        eprintln!("rank {rank}: {switches} switches idle; 10 relayed messages after idle spells: {late} ms late in all");
    }
}

#[test]
fn every_collective_with_pxn_on_and_off_and_where_each_connection_went() {
    let Some(cluster) = cluster() else { return };
    // With 8 buffers a receive, PXN's relays share comms with the relaying rank's own
    // links (receiver-driven): collectives whose messages depend on each other too.
    for (pxn, max_recvs, port) in [(true, "1", 29610), (false, "1", 29611), (true, "8", 29612)] {
        let start = Instant::now();
        let outputs = job(&cluster, "matrix", &[("NCCL_PXN_DISABLE", if pxn { "0" } else { "1" }), ("OXCCL_SOCKET_MAX_RECVS", max_recvs)], port);
        let stdouts = expect(&outputs, 0, "matrix ok", None);
        let mut relayed = 0;
        for (rank, stdout) in stdouts.iter().enumerate() {
            let made = connections(stdout);
            assert!(!made.is_empty(), "rank {rank} reported no connections:\n{stdout}");
            for c in &made {
                let rail = format!("rail{}", rail_of(c.to));
                assert!(!same_host(c.from, c.to), "rank {rank}: a network connection inside a host: {c:?}");
                if c.send {
                    assert_eq!(c.from, rank, "{c:?}");
                    let expected_proxy = if pxn && rail_of(c.from) != rail_of(c.to) { c.from ^ 1 } else { c.from };
                    assert_eq!(c.proxy, expected_proxy, "rank {rank}, PXN {pxn}: {c:?}");
                    let nic = if pxn { rail.clone() } else { format!("rail{}", rail_of(c.from)) };
                    assert_eq!(c.nic, nic, "rank {rank}, PXN {pxn}: the send leaves by {nic}: {c:?}");
                    relayed += usize::from(c.proxy != c.from);
                } else {
                    assert_eq!((c.to, c.nic.as_str()), (rank, format!("rail{}", rail_of(rank)).as_str()), "{c:?}");
                    let expected_proxy = if pxn && rail_of(c.from) != rail_of(c.to) { c.from ^ 1 } else { c.from };
                    assert_eq!(c.proxy, expected_proxy, "rank {rank}, PXN {pxn}: the receiver knows who sends: {c:?}");
                }
            }
        }
        assert_eq!(relayed > 0, pxn, "PXN {pxn}: {relayed} relayed sends");
        eprintln!("PXN {pxn}, max_recvs {max_recvs}: matrix and exchange checked on {NRANKS} ranks in {:?}, {relayed} sends relayed", start.elapsed());
    }
}

/// NCCL's topology XML for the hosts of this cluster as a topology file would describe
/// them: two NUMA nodes, CPU 0 next to rail 0's NIC and CPU 1 next to rail 1's.
fn two_socket_topology() -> std::path::PathBuf {
    let socket = |numa: usize| {
        format!(
            "  <cpu host_hash=\"0x1\" numaid=\"{numa}\" affinity=\"{:08x}\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">\n    <pci busid=\"0000:{:02x}:00.0\" class=\"0x020000\" vendor=\"0x8086\" device=\"0x1592\" subsystem_vendor=\"0x8086\" subsystem_device=\"0x0002\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n      <nic>\n        <net name=\"rail{numa}\" dev=\"{numa}\" speed=\"100000\" port=\"1\" latency=\"0\" guid=\"{:#x}\" maxconn=\"65536\" gdr=\"0\"/>\n      </nic>\n    </pci>\n  </cpu>\n",
            1u32 << numa,
            0x10 + 0x80 * numa,
            0x100 + numa
        )
    };
    let xml = format!("<system version=\"1\">\n{}{}</system>\n", socket(0), socket(1));
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pxn-two-sockets-{}.xml", std::process::id()));
    std::fs::write(&path, xml).unwrap();
    path
}

/// Every rank sees both rails (two devices of its socket net), bound to CPU `local rank`,
/// and NCCL_TOPO_FILE says CPU i is next to rail i's NIC: each rank's own NIC is rail
/// `local rank`'s, so with PXN a send to the other rail goes through the host mate on it,
/// as when each rank is given its rail alone; without PXN it leaves by the sender's far NIC
/// on the receiver's rail (it has one) instead of crossing the spine. Without the file
/// every rank owns both NICs: channel c's connections use rail c mod 2, none relayed.
#[test]
fn a_topology_file_says_which_nic_is_each_ranks_own() {
    let Some(cluster) = cluster() else { return };
    let topo = two_socket_topology();
    let topo = topo.to_str().unwrap();
    for (pxn, port) in [(true, 29640), (false, 29641)] {
        let env = [("NCCL_SOCKET_IFNAME", "=rail0,rail1"), ("NCCL_TOPO_FILE", topo), ("OXCCL_TEST_PIN_LOCAL", "1"), ("NCCL_PXN_DISABLE", if pxn { "0" } else { "1" })];
        let stdouts = expect(&job(&cluster, "exchange", &env, port), 0, "exchange ok", None);
        let mut relayed = 0;
        for (rank, stdout) in stdouts.iter().enumerate() {
            let made = connections(stdout);
            assert!(!made.is_empty(), "rank {rank} reported no connections:\n{stdout}");
            for c in &made {
                let other_rail = rail_of(c.from) != rail_of(c.to);
                assert_eq!(c.proxy, if pxn && other_rail { c.from ^ 1 } else { c.from }, "rank {rank}, PXN {pxn}: {c:?}");
                // Every send leaves on the receiver's rail, and every receive listens on the
                // receiver's own NIC.
                assert_eq!(c.nic, format!("rail{}", rail_of(c.to)), "rank {rank}, PXN {pxn}: {c:?}");
                relayed += usize::from(c.send && c.proxy != c.from);
            }
        }
        assert_eq!(relayed > 0, pxn, "PXN {pxn}: {relayed} relayed sends");
        eprintln!("PXN {pxn}: both rails seen, the topology file's NICs used; {relayed} sends relayed");
    }
    let _ = std::fs::remove_file(topo);
    // Without the file both NICs are every rank's own: nothing is relayed, and channel c's
    // connections use rail c mod 2 at both ends.
    let env = [("NCCL_SOCKET_IFNAME", "=rail0,rail1"), ("OXCCL_TEST_PIN_LOCAL", "1")];
    let stdouts = expect(&job(&cluster, "exchange", &env, 29642), 0, "exchange ok", None);
    for (rank, stdout) in stdouts.iter().enumerate() {
        let made = connections(stdout);
        assert!(!made.is_empty(), "rank {rank} reported no connections:\n{stdout}");
        for c in made {
            assert_eq!((c.proxy, c.nic.clone()), (c.from, format!("rail{}", c.channel % 2)), "rank {rank}, no topology file: {c:?}");
        }
    }
}

#[test]
fn receives_of_several_ranks_through_one_relay_are_posted_together_only_when_the_net_takes_several() {
    let Some(cluster) = cluster() else { return };
    for (max_recvs, port) in [(1, 29620), (8, 29621)] {
        let outputs = job(&cluster, "exchange", &[("OXCCL_SOCKET_MAX_RECVS", &max_recvs.to_string()), ("NCCL_BUFFSIZE", "65536")], port);
        let stdouts = expect(&outputs, 0, "exchange ok", None);
        for (rank, output) in outputs.iter().enumerate() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!stderr.contains("without a goodbye"), "rank {rank} saw a rank leave without a goodbye:\n{stderr}");
        }
        let counts: Vec<(u64, u64, u64)> = stdouts.iter().map(|s| receives(s)).collect();
        let (calls, grouped, across) = counts.iter().fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
        eprintln!("max_recvs {max_recvs}: {calls} irecv calls, {grouped} grouped, {across} for several ranks");
        assert!(calls > 0);
        if max_recvs == 1 {
            assert_eq!((grouped, across), (0, 0), "one buffer per irecv when the net takes one, each rank's on a comm of its own");
        } else {
            assert!(grouped > 0, "receives posted together through relays too");
            // Each rank receives from every other host's rank on its rail both that rank's
            // own messages and those it relays for its host mate, on one comm a channel:
            // every rank posts receives for both together.
            for (rank, &(_, _, across)) in counts.iter().enumerate() {
                assert!(across > 0, "rank {rank}: no receive for several ranks' messages");
            }
        }
    }
}

#[test]
fn a_rank_killed_while_relaying_fails_every_survivor_naming_it_and_they_shrink_and_go_on() {
    let Some(cluster) = cluster() else { return };
    // A comm per relayed link (1 buffer a receive), then comms shared by each relaying
    // rank's links (8): the victim's comms carry its host mate's messages too.
    for (max_recvs, port) in [("1", 29630), ("8", 29631)] {
        let outputs = job(&cluster, "kill", &[("OXCCL_HEARTBEAT_TIMEOUT_MS", "5000"), ("OXCCL_SOCKET_MAX_RECVS", max_recvs)], port);
        let stdouts = expect(&outputs, 5, "alltoall checked", Some(1));
        assert!(outputs[1].status.code().is_none(), "max_recvs {max_recvs}: the victim was killed: {}", outputs[1].status);
        for (rank, stdout) in stdouts.iter().enumerate().filter(|(r, _)| *r != 1) {
            assert!(stdout.contains("failed naming rank 1:"), "max_recvs {max_recvs}, rank {rank}:\n{stdout}");
        }
        eprintln!("max_recvs {max_recvs}: rank 0:\n{}\nrank 3:\n{}", stdouts[0], stdouts[3]);
        // Rank 0 has no rank on rail 1 left on its host: its sends to rail 1 cross the spine.
        let after = connections(&stdouts[0]);
        assert!(after.iter().filter(|c| c.send).all(|c| c.proxy == 0 && c.nic == "rail0"), "max_recvs {max_recvs}: {after:?}");
    }
}

/// alltoall and all_gather busbw with PXN on and off on the cluster, the spine at a
/// quarter of the rails' rate, then Open MPI beside oxccl in one job ([`mpi_beside_oxccl`])
/// (`cargo build --release -p oxccl-bench && cargo test --release -p oxccl-runtime --test
/// pxn_cluster -- --ignored --nocapture pxn_benchmark`).
#[test]
#[ignore]
fn pxn_benchmark() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(HOSTS, 2).link_rate(2000).spine(Some(500))) else { return };
    // PXN off; on with a comm and a receive per message for each relayed link (1 buffer a
    // receive); on with the links of each relaying rank sharing a comm (8).
    let configs = [("off", "1", "8", 29640), ("on, maxRecvs 1", "0", "1", 29641), ("on, maxRecvs 8", "0", "8", 29643)];
    let mut rows: Vec<(String, usize, [(f64, f64); 3])> = Vec::new();
    for (i, (label, disable, max_recvs, port)) in configs.into_iter().enumerate() {
        let outputs = job(&cluster, "bench", &[("NCCL_PXN_DISABLE", disable), ("OXCCL_SOCKET_MAX_RECVS", max_recvs)], port);
        let stdouts = expect(&outputs, 0, "", None);
        eprintln!("PXN {label}: rank 0 {}", stdouts[0].lines().find(|l| l.starts_with("RECVS")).unwrap_or(""));
        for line in stdouts[0].lines().filter_map(|l| l.strip_prefix("BENCH ")) {
            let f: Vec<&str> = line.split(' ').collect();
            let (name, size, time, busbw) = (f[0].to_string(), f[1].parse::<usize>().unwrap(), f[2].parse::<f64>().unwrap(), f[3].parse::<f64>().unwrap());
            match rows.iter_mut().find(|r| r.0 == name && r.1 == size) {
                Some(row) => row.2[i] = (time, busbw),
                None => {
                    let mut row = (name, size, [(0.0, 0.0); 3]);
                    row.2[i] = (time, busbw);
                    rows.push(row);
                }
            }
        }
    }
    println!("# {NRANKS} ranks, {HOSTS} hosts x 2 rails, host links 2000 Mbit/s, spine 500 Mbit/s; time per call (us) and busbw (GB/s): PXN off, on with maxRecvs 1, on with maxRecvs 8 (shared comms)");
    println!("{:>12} {:>10} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9} {:>7} {:>7}", "collective", "size(B)", "off us", "off GB/s", "on1 us", "on1 GB/s", "on8 us", "on8 GB/s", "on1/off", "on8/on1");
    for (name, size, [(t0, b0), (t1, b1), (t2, b2)]) in rows {
        println!("{name:>12} {size:>10} {t0:>10.1} {b0:>9.3} {t1:>10.1} {b1:>9.3} {t2:>10.1} {b2:>9.3} {:>7.2} {:>7.2}", b1 / b0, b2 / b1);
    }
    mpi_beside_oxccl(&cluster);
}

/// Open MPI beside oxccl in one job on the same cluster: oxccl-perf (built by `cargo build
/// --release -p oxccl-bench`, found beside this test's directory) under mpirun across the
/// hosts, each rank given its rail's NIC as in the jobs above (PXN on), its `--baseline mpi`
/// column Open MPI's same collective over its TCP BTL on both rails of each host (Open MPI
/// pairs them by subnet and stripes over them: its best on this cluster).
fn mpi_beside_oxccl(cluster: &Cluster) {
    let perf = std::env::current_exe().unwrap().parent().and_then(Path::parent).map(|dir| dir.join("oxccl-perf"));
    let Some(perf) = perf.filter(|p| p.exists()) else {
        println!("# Open MPI not run beside oxccl: no oxccl-perf beside the test (cargo build --release -p oxccl-bench)");
        return;
    };
    let wrapper = cluster.directory().join("perf-on-own-rail.sh");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexport NCCL_SOCKET_IFNAME=\"=rail${{OMPI_COMM_WORLD_LOCAL_RANK}}\"\nexec {} \"$@\"\n", perf.display())).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env = [("NCCL_NET_PLUGIN", "none"), ("OXCCL_SOCKET_MAX_RECVS", "8"), ("OXCCL_PROXY_THREADS", "1")];
    // OXCCL_TEST_MPI_INTERFACES: the rails Open MPI's TCP BTL may use (default both).
    let interfaces = std::env::var("OXCCL_TEST_MPI_INTERFACES").unwrap_or_else(|_| "rail0,rail1".into());
    println!("# Open MPI's TCP BTL on {interfaces}");
    for collective in ["alltoall", "all_gather"] {
        let mut command = mpirun::command_over(cluster, &[0, 1, 2, 3], RANKS_PER_HOST, &env, &wrapper, &interfaces).unwrap();
        command.args([collective, "-b", "64K", "-e", "16M", "-f", "4", "-n", "5", "-w", "1", "-c", "1", "--blocking", "1", "--baseline", "mpi"]);
        let output = oxccl_testkit::run(command, JOB_TIMEOUT);
        println!("{}", String::from_utf8_lossy(&output.stdout));
        assert!(output.status.success(), "oxccl-perf {collective} under mpirun: {}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    }
}
