//! `agent --metrics`: connections and bytes by destination group, for Prometheus, with a cap
//! on the number of groups (a host-wide agent sees every peer of the host; a scrape must not
//! grow with them).
//!
//! Groups are the path database's ([`peer_group`]: an IPv4 address, an IPv6 /64); the first
//! [`DEFAULT_MAX_GROUPS`] get series of their own, later ones are summed up as `other`.

use crate::record::{applied, ConnRecord, Kind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Mutex;
use tcptune_core::pathdb::peer_group;

/// Groups with series of their own.
pub const DEFAULT_MAX_GROUPS: usize = 256;
/// The label of the groups beyond the cap.
pub const OTHER: &str = "other";

/// Which groups have series of their own (pure: the first `max` seen).
#[derive(Debug)]
pub struct GroupCap {
    max: usize,
    seen: HashSet<String>,
}

impl GroupCap {
    /// At most `max` groups.
    pub fn new(max: usize) -> GroupCap {
        GroupCap {
            max,
            seen: HashSet::new(),
        }
    }

    /// The label of `peer`'s group: the group itself while there is room, else [`OTHER`].
    pub fn label(&mut self, peer: &str) -> String {
        let g = peer_group(peer);
        if self.seen.contains(&g) {
            return g;
        }
        if self.seen.len() < self.max {
            self.seen.insert(g.clone());
            return g;
        }
        OTHER.to_string()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnLabels {
    group: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    group: String,
    direction: String,
}

/// The agent's metric families.
#[derive(Debug)]
pub struct AgentMetrics {
    connections: Family<ConnLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    groups: Mutex<GroupCap>,
}

/// What became of a connection, as the metrics count it.
pub fn outcome(r: &ConnRecord) -> &'static str {
    if r.applied_bits & applied::ADVISED != 0 {
        "advised"
    } else if r.tuned() {
        "tuned"
    } else {
        "observed"
    }
}

impl AgentMetrics {
    /// Empty families, at most `max_groups` groups.
    pub fn new(max_groups: usize) -> AgentMetrics {
        AgentMetrics {
            connections: Family::default(),
            bytes: Family::default(),
            groups: Mutex::new(GroupCap::new(max_groups)),
        }
    }

    /// Register the families (the metric handles stay here).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcptune_agent_connections",
            "Connections closed in the agent's cgroup, by destination group and outcome (tuned, observed, advised)",
            self.connections.clone(),
        );
        registry.register(
            "tcptune_agent_bytes",
            "Bytes of the connections closed in the agent's cgroup, by destination group and direction (sent: acknowledged by the peer; received)",
            self.bytes.clone(),
        );
    }

    /// Count one close record (advice records describe no connection's end: not counted).
    pub fn observe(&self, r: &ConnRecord) {
        if r.kind != Kind::Close {
            return;
        }
        let group = match self.groups.lock() {
            Ok(mut g) => g.label(&r.peer.to_string()),
            Err(_) => OTHER.to_string(),
        };
        self.connections
            .get_or_create(&ConnLabels {
                group: group.clone(),
                outcome: outcome(r).to_string(),
            })
            .inc();
        for (direction, n) in [("sent", r.bytes_acked), ("received", r.bytes_received)] {
            self.bytes
                .get_or_create(&BytesLabels {
                    group: group.clone(),
                    direction: direction.to_string(),
                })
                .inc_by(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{parse, tests::raw};

    #[test]
    fn groups_beyond_the_cap_are_other() {
        let mut cap = GroupCap::new(2);
        assert_eq!(cap.label("10.0.0.1"), "10.0.0.1");
        assert_eq!(cap.label("2001:db8:1:2::5"), "2001:db8:1:2::/64");
        assert_eq!(cap.label("2001:db8:1:2::6"), "2001:db8:1:2::/64");
        assert_eq!(cap.label("10.0.0.3"), OTHER);
        assert_eq!(cap.label("10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn close_records_are_counted_by_group_and_outcome() {
        let m = AgentMetrics::new(1);
        let mut reg = Registry::default();
        m.register(&mut reg);
        let tuned = parse(&raw(1, 1000, 10, 1)).expect("record");
        m.observe(&tuned);
        let mut other = tuned.clone();
        other.peer = "10.9.9.9".parse().expect("ip");
        other.applied_bits = 0;
        other.applied.clear();
        m.observe(&other);
        m.observe(&parse(&raw(2, 0, 0, 0)).expect("advice"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
        for want in [
            "tcptune_agent_connections_total{group=\"10.231.0.2\",outcome=\"tuned\"} 1",
            "tcptune_agent_connections_total{group=\"other\",outcome=\"observed\"} 1",
            "tcptune_agent_bytes_total{group=\"10.231.0.2\",direction=\"sent\"} 1000",
            "tcptune_agent_bytes_total{group=\"other\",direction=\"received\"} 10",
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
    }
}
