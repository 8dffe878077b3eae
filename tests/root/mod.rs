//! Root tests: real iptables, nft and packets inside throwaway network namespaces.

mod agent;
mod health;
mod netns;
mod packets;
mod show_cleanup;
