//! The simulated cluster itself: hosts reach each other on a rail, a link rate holds, rails
//! are separate unless a spine joins them, and nothing is left behind. The processes in the
//! hosts are this test binary re-run as `child`, told what to do by OXCCL_TEST_CLUSTER_ROLE.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::Command;
use std::time::{Duration, Instant};

use oxccl_testkit::cluster::{mpirun, Cluster, Host, Spec, PROCESS_TIMEOUT};
use socket2::{Domain, Socket, Type};

const PORT: u16 = 5000;

/// A process in a host: `serve <bytes>` accepts one connection on port 5000 of every
/// address and sends it that many bytes; `fetch <from> <to> <bytes>` connects from address
/// `from` to `to`:5000 and reads them, printing the seconds it took (or the connect error).
#[test]
fn child() {
    let Ok(role) = std::env::var("OXCCL_TEST_CLUSTER_ROLE") else { return };
    let words: Vec<&str> = role.split_whitespace().collect();
    match words[..] {
        ["serve", bytes] => {
            let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).unwrap();
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(&vec![7u8; bytes.parse().unwrap()]).unwrap();
        }
        ["fetch", from, to, bytes] => {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket.bind(&SocketAddr::new(from.parse().unwrap(), 0).into()).unwrap();
            let target: SocketAddr = SocketAddr::new(to.parse().unwrap(), PORT);
            let until = Instant::now() + Duration::from_secs(20);
            let mut stream: std::net::TcpStream = loop {
                match socket.connect(&target.into()) {
                    Ok(()) => break socket.into(),
                    // The server may not be listening yet.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => {
                        println!("connect failed: {e}");
                        return;
                    }
                }
            };
            let start = Instant::now();
            let mut data = Vec::new();
            stream.read_to_end(&mut data).unwrap();
            assert_eq!(data.len(), bytes.parse::<usize>().unwrap());
            println!("fetched in {:.3} s", start.elapsed().as_secs_f64());
        }
        _ => panic!("unknown role {role}"),
    }
}

fn role(host: &Host, role: &str) -> Command {
    let mut command = host.command(std::env::current_exe().unwrap());
    command.args(["child", "--exact", "--nocapture", "--test-threads", "1"]).env("OXCCL_TEST_CLUSTER_ROLE", role);
    command
}

/// Serves `bytes` from `server` to `client` (from its rail-`from` address to the server's
/// rail-`to` address); answers what the client printed.
fn fetch(server: &Host, client: &Host, from: usize, to: usize, bytes: usize) -> String {
    let mut serving = role(server, &format!("serve {bytes}")).spawn().unwrap();
    let command = role(client, &format!("fetch {} {} {bytes}", client.address(from), server.address(to)));
    let output = oxccl_testkit::run(command, PROCESS_TIMEOUT);
    let _ = serving.kill();
    let _ = serving.wait();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // libtest prints "test child ... " before the child's own line: look inside lines.
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let start = stdout.find("fetched in").or_else(|| stdout.find("connect failed")).unwrap_or_else(|| panic!("the client said nothing: {stdout}"));
    stdout[start..].lines().next().unwrap_or_default().to_string()
}

fn seconds(line: &str) -> f64 {
    line.split_whitespace().nth(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no time in {line:?}"))
}

fn listed_namespaces() -> String {
    String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).into_owned()
}

#[test]
fn hosts_reach_each_other_over_a_rail_and_nothing_is_left_behind() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(2, 1)) else { return };
    let (h0, h1) = (&cluster.hosts[0], &cluster.hosts[1]);
    assert_eq!((h0.address(0), h1.address(0)), (Ipv4Addr::new(10, 100, 0, 1), Ipv4Addr::new(10, 100, 0, 2)));
    assert!(fetch(h0, h1, 0, 0, 1 << 20).starts_with("fetched"));
    let namespaces = cluster.namespaces().to_vec();
    assert_eq!(namespaces.len(), 3, "two hosts and the fabric");
    drop(cluster);
    let listed = listed_namespaces();
    assert!(namespaces.iter().all(|n| !listed.contains(n.as_str())), "left behind: {listed}");
}

#[test]
fn a_link_rate_holds() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(2, 1).link_rate(80)) else { return };
    // 4 MB at 80 Mb/s: at least 0.4 s (a little less: the first burst is free).
    let took = seconds(&fetch(&cluster.hosts[0], &cluster.hosts[1], 0, 0, 4_000_000));
    assert!(took > 0.3, "4 MB in {took} s over an 80 Mb/s link");
}

#[test]
fn rails_are_separate_unless_a_spine_joins_them() {
    let Some(separate) = Cluster::or_skip(&Spec::new(2, 2)) else { return };
    let (h0, h1) = (&separate.hosts[0], &separate.hosts[1]);
    assert!(fetch(h0, h1, 1, 1, 1000).starts_with("fetched"), "rail 1 to rail 1");
    let across = fetch(h0, h1, 0, 1, 1000);
    assert!(across.contains("connect failed: No route to host"), "rail 0 reached rail 1 without a spine: {across}");
    drop(separate);
    // The cluster PXN needs: 4 hosts x 2 rails and a spine; a host's rail-0 address reaches
    // another host's rail-1 address only through the spine.
    let Some(joined) = Cluster::or_skip(&Spec::new(4, 2).link_rate(1000).spine(Some(100))) else { return };
    assert_eq!(joined.hosts[3].address(1), Ipv4Addr::new(10, 101, 0, 4));
    assert!(fetch(&joined.hosts[0], &joined.hosts[3], 0, 1, 1000).starts_with("fetched"), "across the spine");
    assert!(fetch(&joined.hosts[2], &joined.hosts[1], 1, 1, 1000).starts_with("fetched"), "on rail 1");
}

/// What a command prints (stdout, trimmed) and its exit code, under the process timeout.
fn output_of(command: Command) -> (String, Option<i32>, String) {
    let output = oxccl_testkit::run(command, PROCESS_TIMEOUT);
    (String::from_utf8_lossy(&output.stdout).trim().to_string(), output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn hosts_have_names_the_remote_agent_enters_them_and_their_files_are_deleted() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(2, 2)) else { return };
    let mut names = cluster.hosts[1].command("sh");
    names.args(["-c", "hostname; getent hosts h0"]);
    let (printed, _, _) = output_of(names);
    assert_eq!(printed.split_whitespace().collect::<Vec<_>>(), ["h1", "10.100.0.1", "h0"], "inside h1: its name, and h0 resolving to its rail-0 address");

    // The agent, as mpirun calls it: a host by any of its addresses or its name, the
    // command's words joined, a login's environment (not the caller's), the command's status.
    let agent = |host: &str, words: &[&str]| {
        let mut command = Command::new(mpirun::agent());
        command.env("NETNS_RSH_HOSTS", cluster.host_map()).env("OXCCL_TEST_CALLER", "leaked").arg(host).args(words);
        output_of(command)
    };
    for host in ["10.101.0.2", "10.100.0.2", "h1"] {
        let (printed, code, stderr) = agent(host, &["echo", "$(hostname)", "${OXCCL_TEST_CALLER:-unset}"]);
        assert_eq!((printed.as_str(), code), ("h1 unset", Some(0)), "netns-rsh.sh {host}: {stderr}");
    }
    assert_eq!(agent("h0", &["exit", "3"]).1, Some(3));
    let (_, code, stderr) = agent("h9", &["true"]);
    assert_eq!(code, Some(255), "an unknown host: {stderr}");
    assert!(stderr.contains("no host 'h9'") && stderr.contains("h0 h1"), "an unknown host, and the hosts there are: {stderr}");

    let files: Vec<std::path::PathBuf> = cluster.namespaces().iter().map(|namespace| std::path::Path::new("/etc/netns").join(namespace)).collect();
    assert!(files[1].join("hosts").exists(), "{} is not there", files[1].display());
    let directory = cluster.directory().to_path_buf();
    drop(cluster);
    for path in files.iter().chain([&directory]) {
        assert!(!path.exists(), "{} was left behind", path.display());
    }
}
