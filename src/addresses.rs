//! This node's own addresses, read over rtnetlink (`crate::netlink::route`): what it can send
//! from and its interfaces' names, and the config's output addresses resolved from one dump
//! of the families they need. The subscription to address changes and the kernel's route
//! lookup are rtnetlink's own, named here for their users.

use crate::netlink::interface_name;
use crate::netlink::route::{self, whole_only};
pub use crate::netlink::route::{is_interrupted, AddressEvents, Routes};
use crate::plan::egress::NodeAddress;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;

/// What this node has: every address it can send from (with its interface's name), and the
/// names of all its interfaces, sorted. One dump of each.
pub struct NodeView {
    pub addresses: Vec<NodeAddress>,
    pub interfaces: Vec<String>,
}

/// Reads the [`NodeView`] of this network namespace.
pub fn node_view() -> io::Result<NodeView> {
    let socket = route::socket()?;
    let names: HashMap<u32, String> =
        route::links(&socket, whole_only(HashMap::new), |names, index, name| {
            names.insert(index, name);
        })?;
    let mut addresses: Vec<NodeAddress> = route::usable_addresses(
        &socket,
        libc::AF_UNSPEC,
        whole_only(Vec::new),
        |found, a| {
            found.push(NodeAddress {
                interface: names
                    .get(&a.index)
                    .cloned()
                    .unwrap_or_else(|| format!("if{}", a.index)),
                address: a.address,
                prefix_len: a.prefix_len,
                deprecated: a.deprecated(),
            });
        },
    )?;
    addresses.sort_by(|a, b| (a.address, &a.interface).cmp(&(b.address, &b.interface)));
    let mut interfaces: Vec<String> = names.into_values().collect();
    interfaces.sort();
    Ok(NodeView {
        addresses,
        interfaces,
    })
}

/// The addresses this node holds, for membership tests.
pub fn node_address_set() -> io::Result<std::collections::HashSet<IpAddr>> {
    let socket = route::socket()?;
    route::usable_addresses(
        &socket,
        libc::AF_UNSPEC,
        whole_only(std::collections::HashSet::new),
        |found, a| {
            found.insert(a.address);
        },
    )
}

/// The config's output addresses resolved against this node's addresses, read in one streamed
/// dump of the families the resolver needs: no interface dump (an interface is named only
/// when an error lists its address), and memory that does not grow with the number of
/// addresses.
pub fn resolve_output_addresses(
    resolver: &crate::plan::egress::Resolver,
) -> io::Result<crate::plan::egress::Resolution> {
    let af = match resolver.families().as_slice() {
        [crate::plan::Family::V4] => libc::AF_INET,
        [crate::plan::Family::V6] => libc::AF_INET6,
        _ => libc::AF_UNSPEC,
    };
    let socket = route::socket()?;
    let resolved = route::usable_addresses(
        &socket,
        af,
        route::Attempts {
            start: || resolver.clone(),
            agree: |one: &crate::plan::egress::Resolver, other: &crate::plan::egress::Resolver| {
                one.chosen() == other.chosen()
            },
        },
        |resolver, a| {
            resolver.offer(a.address, a.deprecated(), || {
                interface_name(a.index).unwrap_or_else(|| format!("if{}", a.index))
            });
        },
    )?;
    Ok(resolved.finish())
}
