//! What one `tcptune watch` refresh costs with thousands of connections, against `ss -tin`
//! and `ss -tinm` measured in the same run (alternating, medians).
//!
//! ```text
//! ip netns add ttwb && ip -n ttwb link set lo up
//! ip netns exec ttwb target/release/examples/watch_cost 5000 21
//! ip netns del ttwb
//! ```
//!
//! Arguments: connections (default 5000), rounds (default 21). Opens that many loopback
//! connections (twice as many sockets), then per round times (a) a full watch refresh:
//! both inet_diag dumps, the tracker, sorting and rendering the table to a string, and
//! (b) `ss -tin` and `ss -tinm` with output to /dev/null. CPU is user+system time from
//! getrusage (this thread for watch; the children for ss).
//!
//! With `WATCH_COST_TSV=FILE` it also appends every round's times to FILE, one line per
//! round and measurement (`round`, `what`, `wall_ms`, `cpu_ms` tab-separated; `-` where
//! not measured): `bench/watch_cost.sh` makes `bench/raw/watch_cost.tsv` of them.

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tcptune_doctor::diag::{dump_tcp, DiagSocket};
use tcptune_doctor::procmap::socket_owners;
use tcptune_doctor::watch::{
    render_table, sort_rows, HintContext, SortKey, TableStyle, Tracker, WatchReport,
};

fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills a plain struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn raise_nofile(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: valid pointer; failure is reported by the connect errors that follow.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    if r != 0 {
        eprintln!("setrlimit NOFILE {n}: {}", std::io::Error::last_os_error());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(21);
    raise_nofile((2 * n + 1000) as u64);
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let t0 = Instant::now();
    let mut keep = Vec::with_capacity(2 * n);
    for i in 0..n {
        let c = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect #{i}: {e}"));
        let (s, _) = l.accept().expect("accept");
        keep.push(c);
        keep.push(s);
    }
    eprintln!(
        "{n} connections ({} sockets) in {:.1} s",
        2 * n,
        t0.elapsed().as_secs_f64()
    );

    let mut sock = DiagSocket::open().expect("netlink");
    let ctx = HintContext {
        limits: tcptune_sys::sysctl::read_host_limits().ok(),
        target: None,
    };
    let mut tracker = Tracker::new();
    let start = Instant::now();
    let (mut w_wall, mut w_cpu, mut d_wall) = (vec![], vec![], vec![]);
    let (mut d_cpu, mut r_wall) = (vec![], vec![]);
    let (mut s_wall, mut s_cpu, mut m_wall, mut m_cpu) = (vec![], vec![], vec![], vec![]);
    let mut seen = 0;
    let mut tsv = String::new();
    let line =
        |tsv: &mut String, round: usize, what: &str, wall: Duration, cpu: Option<Duration>| {
            let cpu = cpu.map_or("-".to_string(), ms);
            tsv.push_str(&format!("{round}\t{what}\t{}\t{cpu}\n", ms(wall)));
        };
    for round in 0..rounds {
        // (a) a full watch refresh
        let c0 = cpu(libc::RUSAGE_THREAD);
        let t = Instant::now();
        let conns = dump_tcp(&mut sock).expect("dump");
        d_wall.push(t.elapsed());
        d_cpu.push(cpu(libc::RUSAGE_THREAD) - c0);
        let tr = Instant::now();
        let total = conns.len();
        let mut rows = tracker.rows(start.elapsed(), conns, &ctx);
        sort_rows(&mut rows, SortKey::Rate);
        seen = rows.len();
        let report = WatchReport {
            schema_version: 1,
            refresh: 0,
            total,
            limited_by_rwnd: 0,
            limited_by_sndbuf: 0,
            dump_us: 0,
            connections: rows,
        };
        let text = render_table(&report, TableStyle::default());
        std::hint::black_box(text);
        r_wall.push(tr.elapsed());
        w_wall.push(t.elapsed());
        w_cpu.push(cpu(libc::RUSAGE_THREAD) - c0);
        // (b) ss -tin, ss -tinm
        for (args, wall, cpuv) in [
            ("-tin", &mut s_wall, &mut s_cpu),
            ("-tinm", &mut m_wall, &mut m_cpu),
        ] {
            let c0 = cpu(libc::RUSAGE_CHILDREN);
            let t = Instant::now();
            let st = Command::new("ss")
                .arg(args)
                .stdout(Stdio::null())
                .status()
                .expect("ss");
            assert!(st.success());
            wall.push(t.elapsed());
            cpuv.push(cpu(libc::RUSAGE_CHILDREN) - c0);
        }
        line(&mut tsv, round, "dump", d_wall[round], Some(d_cpu[round]));
        line(&mut tsv, round, "render", r_wall[round], None);
        line(&mut tsv, round, "watch", w_wall[round], Some(w_cpu[round]));
        line(&mut tsv, round, "ss_tin", s_wall[round], Some(s_cpu[round]));
        line(
            &mut tsv,
            round,
            "ss_tinm",
            m_wall[round],
            Some(m_cpu[round]),
        );
    }
    if let Some(path) = std::env::var_os("WATCH_COST_TSV") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("WATCH_COST_TSV");
        f.write_all(tsv.as_bytes()).expect("writing WATCH_COST_TSV");
    }
    let t = Instant::now();
    let owners = socket_owners(std::path::Path::new("/proc"));
    let proc_wall = t.elapsed();

    let (ww, wc) = (median(&mut w_wall), median(&mut w_cpu));
    let (sw, sc) = (median(&mut s_wall), median(&mut s_cpu));
    let (mw, mc) = (median(&mut m_wall), median(&mut m_cpu));
    println!("connections: {n} ({seen} sockets with tcp_info in the dump), rounds: {rounds}");
    println!("| what | wall ms (median) | CPU ms (median) | wall vs ss -tin |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| inet_diag dump only (IPv4 + IPv6) | {} | {} | {:.2} |",
        ms(median(&mut d_wall)),
        ms(median(&mut d_cpu)),
        median(&mut d_wall).as_secs_f64() / sw.as_secs_f64()
    );
    println!(
        "| tracker + sort + table of all rows | {} | - | {:.2} |",
        ms(median(&mut r_wall)),
        median(&mut r_wall).as_secs_f64() / sw.as_secs_f64()
    );
    println!(
        "| tcptune watch refresh (dump + tracker + sort + table) | {} | {} | {:.2} |",
        ms(ww),
        ms(wc),
        ww.as_secs_f64() / sw.as_secs_f64()
    );
    println!("| ss -tin > /dev/null | {} | {} | 1.00 |", ms(sw), ms(sc));
    println!(
        "| ss -tinm > /dev/null | {} | {} | {:.2} |",
        ms(mw),
        ms(mc),
        mw.as_secs_f64() / sw.as_secs_f64()
    );
    println!(
        "| /proc/*/fd scan for --process ({} sockets mapped) | {} | - | {:.2} |",
        owners.len(),
        ms(proc_wall),
        proc_wall.as_secs_f64() / sw.as_secs_f64()
    );
    println!(
        "CPU share of a 1 s refresh: {:.1}% of one core",
        wc.as_secs_f64() * 100.0
    );
}
