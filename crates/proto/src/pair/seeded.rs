//! Seeded random pairs: each seed draws a path (RTT, streams, write time, a secret, a
//! client clock that forces the challenge), a schedule (random extra delays per connection:
//! data hellos before, between and after the control frames) and one adversity (none, an
//! intruder's data hellos, a mutated field of either side, a lost control connection).
//!
//! A fixed set of seeds always runs; then random seeds for `TCPTUNE_FUZZ_SECONDS` (default
//! 1 s). Every seed is printed before it runs; `TCPTUNE_FUZZ_SEED=N` runs that one alone.

use super::{leaves, Pair, PairConfig, Shuffle, Trace, UNIX_S};
use crate::session::fuzz::Rng;
use crate::wire::{DataHello, Token, DATA_HELLO_LEN};
use std::time::{Duration, Instant};

/// The server's stream limit in the pair's endpoint configuration.
const MAX_STREAMS: u32 = 8;

/// Seeds that run every time.
const FIXED: std::ops::RangeInclusive<u64> = 1..=40;
/// Seeds the random part once found failing, run every time after their fix: a stolen-token
/// hello that arrived before its session's Hello filled the last place its eighth stream
/// needed (fixed by checking waiting hellos when the keys are agreed).
const FOUND: [u64; 1] = [2_829_388_240_049_364_229];

/// The random part's time box: `TCPTUNE_FUZZ_SECONDS`, default 1 s.
fn budget() -> Duration {
    std::env::var("TCPTUNE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(1), Duration::from_secs_f64)
}

/// What a seed does to the pair besides shuffling it.
#[derive(Clone, Debug)]
enum Adversity {
    None,
    /// Data connections of an intruder, with hellos of its own, at these times.
    Intruders(Vec<(Duration, Intruder)>),
    /// Client message `.0`'s field `.1` becomes `.2`.
    Client(usize, Vec<String>, serde_json::Value),
    /// The same for a server message.
    Server(usize, Vec<String>, serde_json::Value),
    /// The control connection is lost after this many messages.
    Cut(usize),
}

/// An intruder's data hello.
#[derive(Clone, Copy, Debug)]
enum Intruder {
    /// A token nobody holds (guessing, from another host).
    WrongToken,
    /// The session's token (stolen, used from another host) with a phase that never runs.
    FuturePhase,
    /// The session's token with a stream index past the server's stream limit.
    StreamOutOfRange,
    /// Bytes that are not a hello (from another host).
    Garbage,
    /// The session's token read off the wire, without the session's keys (a wrong tag),
    /// from the client's host (behind the same NAT).
    StolenToken,
}

#[derive(Debug)]
struct Case {
    cfg: PairConfig,
    shuffle_max: Duration,
    adversity: Adversity,
}

fn hostile(r: &mut Rng) -> serde_json::Value {
    use serde_json::json;
    match r.below(9) {
        0 => json!(r.pick_u64()),
        1 => json!(-(r.below(1000) as i64) - 1),
        2 => json!(f64::from_bits(r.next()).abs().min(1e308)),
        3 => json!(""),
        4 => json!("y".repeat(r.below(70_000) as usize)),
        5 => json!(null),
        6 => json!(r.chance(50)),
        7 => json!({"type": "bye"}),
        _ => json!([r.below(10), r.below(10)]),
    }
}

/// A random field of one of `msgs`, if there is one.
fn field(r: &mut Rng, msgs: &[serde_json::Value]) -> Option<(usize, Vec<String>)> {
    if msgs.is_empty() {
        return None;
    }
    let n = r.below(msgs.len() as u64) as usize;
    let paths = leaves(&msgs[n]);
    let path = paths.get(r.below(paths.len() as u64) as usize)?.clone();
    Some((n, path))
}

fn case(seed: u64) -> Case {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let rtt = Duration::from_millis([1, 10, 40, 200][r.below(4) as usize]);
    let secret: Option<&'static [u8]> = r.chance(40).then_some(b"seeded secret");
    let cfg = PairConfig {
        rtt,
        write_time: Duration::from_millis(1 + r.below(1500)),
        streams: 1 + r.below(8) as u32,
        secret,
        client_secret: secret,
        client_unix_s: if r.chance(30) { UNIX_S + 3600 } else { UNIX_S },
    };
    let shuffle_max = rtt * r.below(4) as u32 + Duration::from_micros(r.below(5000));
    // The honest run of this path and schedule, whose messages the adversity picks from.
    let honest = play(seed, &cfg, shuffle_max, &Adversity::None).1;
    let adversity = match r.below(6) {
        0 => Adversity::None,
        1 => Adversity::Intruders(
            (0..1 + r.below(4))
                .map(|_| {
                    let at = Duration::from_micros(r.below(4 * rtt.as_micros() as u64 + 1));
                    let who = match r.below(5) {
                        0 => Intruder::WrongToken,
                        1 => Intruder::FuturePhase,
                        2 => Intruder::StreamOutOfRange,
                        3 => Intruder::StolenToken,
                        _ => Intruder::Garbage,
                    };
                    (at, who)
                })
                .collect(),
        ),
        2 => match field(&mut r, &honest.client_msgs) {
            Some((n, p)) => Adversity::Client(n, p, hostile(&mut r)),
            None => Adversity::None,
        },
        3 => match field(&mut r, &honest.server_msgs) {
            Some((n, p)) => Adversity::Server(n, p, hostile(&mut r)),
            None => Adversity::None,
        },
        _ => Adversity::Cut(r.below(honest.delivered as u64 + 1) as usize),
    };
    Case {
        cfg,
        shuffle_max,
        adversity,
    }
}

fn hello(who: Intruder, streams: u32) -> [u8; DATA_HELLO_LEN] {
    // The pair's client uses token [9; 16] and phase 0.
    // Nobody but the client has the session's keys: the intruders' tags are guesses.
    let h = |token: [u8; 16], seq: u32, stream: u32| {
        DataHello {
            token: Token(token),
            seq,
            stream,
            tag: [0x3c; 16],
        }
        .encode()
    };
    match who {
        Intruder::WrongToken => h([7; 16], 0, 0),
        Intruder::FuturePhase => h([9; 16], 5, 0),
        Intruder::StreamOutOfRange => h([9; 16], 0, MAX_STREAMS + streams),
        Intruder::Garbage => [0x5a; DATA_HELLO_LEN],
        Intruder::StolenToken => h([9; 16], 0, 0),
    }
}

fn play(seed: u64, cfg: &PairConfig, shuffle_max: Duration, adv: &Adversity) -> (bool, Trace) {
    let mut p = Pair::new(Instant::now(), cfg.clone());
    p.shuffle = Some(Shuffle::new(seed, shuffle_max));
    match adv {
        Adversity::None => {}
        Adversity::Intruders(list) => {
            for (at, who) in list {
                // Only a process on the client's host would have the token.
                let local = matches!(who, Intruder::StreamOutOfRange | Intruder::StolenToken);
                p.inject_hello(*at, hello(*who, cfg.streams), local);
            }
        }
        Adversity::Client(n, path, to) => p.mutate = Some((*n, path.clone(), to.clone())),
        Adversity::Server(n, path, to) => p.mutate_server = Some((*n, path.clone(), to.clone())),
        Adversity::Cut(n) => p.cut_after = Some(*n),
    }
    let ok = p.run(Duration::from_secs(600));
    (ok, p.trace)
}

/// Run seed `seed` and check what must hold whatever the seed drew.
fn check(seed: u64) {
    let c = case(seed);
    let mut shown = format!("{c:?}");
    shown.truncate(300);
    println!("pair seed {seed} (TCPTUNE_FUZZ_SEED={seed}): {shown}");
    let (ok, t) = play(seed, &c.cfg, c.shuffle_max, &c.adversity);
    let what = format!("seed {seed}");
    assert!(ok, "{what}: a side hangs: {t:?}");
    assert!(t.failures <= 1, "{what}: {} failures", t.failures);
    // One line for the session; its data connections (or an intruder's) may be refused too.
    assert!(t.control_error_lines() <= 1, "{what}: {:?}", t.log);
    if intruders(&c) == 0 && matches!(c.adversity, Adversity::None) {
        assert_eq!(t.error_lines(), 0, "{what}: {:?}", t.log);
    }
    // Every stream is attached at most once, and only the client's own connections are.
    let mut idx: Vec<u32> = t.attached.iter().map(|(_, i)| *i).collect();
    idx.sort_unstable();
    let before = idx.len();
    idx.dedup();
    assert_eq!(idx.len(), before, "{what}: a stream attached twice: {t:?}");
    // A phase may grow its streams up to the server's limit, so the server accepts an
    // index up to there (from the session's address, with its token).
    assert!(
        idx.iter().all(|i| *i < MAX_STREAMS),
        "{what}: {:?}",
        t.attached
    );
    let legal = match &c.adversity {
        Adversity::None => true,
        // A hello of a guessed token or garbage never reaches the session, nor does one with
        // the stolen token but no key. An intruder with the session's token may take one of
        // the slots its hellos wait in before the session is admitted (the honest session
        // may then fail, cleanly).
        Adversity::Intruders(list) => list.iter().all(|(_, w)| {
            matches!(
                w,
                Intruder::WrongToken | Intruder::Garbage | Intruder::StolenToken
            )
        }),
        _ => false,
    };
    if legal {
        // Whatever the order of arrival, an honest session completes with every byte.
        assert!(t.failure.is_none(), "{what}: {:?}", t.failure);
        let o = t.outcome.as_ref();
        let remote = o.and_then(|o| o.remote.as_ref());
        let bytes: u64 = remote.map_or(0, |r| r.streams.iter().map(|s| s.bytes).sum());
        let p = super::params(c.cfg.streams);
        let per = p.message_size * p.messages / u64::from(c.cfg.streams);
        assert_eq!(bytes, per * u64::from(c.cfg.streams), "{what}: {t:?}");
        assert_eq!(idx.len() as u32, c.cfg.streams, "{what}: {:?}", t.attached);
        // Only intruders' connections were refused.
        assert!(t.closed_data.len() <= intruders(&c), "{what}: {t:?}");
    } else {
        assert!(
            t.failure.is_some() || t.returned.is_some(),
            "{what}: the client neither completed nor failed: {t:?}"
        );
    }
    if let Adversity::Intruders(list) = &c.adversity {
        // No intruder's connection is ever handed to the engine (theirs are the first
        // connections after the control connection's).
        let last_intruder = super::CTRL + list.len() as u64;
        assert!(
            t.attached.iter().all(|(conn, _)| *conn > last_intruder),
            "{what}: an intruder attached: {:?}",
            t.attached
        );
    }
}

fn intruders(c: &Case) -> usize {
    match &c.adversity {
        Adversity::Intruders(l) => l.len(),
        _ => 0,
    }
}

#[test]
fn seeded_pairs_with_shuffled_streams_and_one_adversity_end_cleanly() {
    if let Some(seed) = std::env::var("TCPTUNE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        return check(seed);
    }
    for seed in FIXED.chain(FOUND) {
        check(seed);
    }
    // The random part: seeds from the clock, each printed before it runs.
    let budget = budget();
    let started = Instant::now();
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut n = 0u64;
    while started.elapsed() < budget {
        check(base.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 1);
        n += 1;
    }
    println!("{} fixed and {n} random seeds in {budget:?}", FIXED.count());
}

#[test]
fn data_hellos_before_during_and_after_the_control_setup_are_all_accepted() {
    // Enough seeds that both orders happen: a stream's hello parked before its session
    // exists, and one arriving after it.
    let (mut early, mut late) = (0, 0);
    for seed in 1..=200 {
        // Data hellos go once the client has the server's key share: in `Accepted` (after
        // the session is admitted, so a hello comes early only when the shuffle delays the
        // phase's start) or, when the server challenges a proof (a client clock that is
        // off), in the challenge (the hellos then race the client's answer).
        let base = if seed % 2 == 0 {
            PairConfig::default()
        } else {
            PairConfig {
                client_unix_s: UNIX_S + 3600,
                ..PairConfig::with_secret(b"a shared secret of 128 bits at least")
            }
        };
        let cfg = PairConfig {
            streams: 4,
            write_time: Duration::from_millis(50),
            ..base
        };
        let max = cfg.rtt * 4;
        println!("shuffle seed {seed}");
        let (ok, t) = play(seed, &cfg, max, &Adversity::None);
        assert!(ok && t.failure.is_none(), "seed {seed}: {t:?}");
        assert_eq!(t.attached.len(), 4, "seed {seed}: {:?}", t.attached);
        assert!(t.closed_data.is_empty(), "seed {seed}: {t:?}");
        early += t.early_hellos;
        late += 4 - t.early_hellos;
    }
    println!("{early} hellos before their session, {late} after");
    assert!(early > 50 && late > 50, "{early} early, {late} late");
}
