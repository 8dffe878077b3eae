//! Whether systemd is stopping this agent for good or only restarting it: `--cleanup-on-exit`
//! removes the rules on a stop, but a restart (`systemctl restart`, a package upgrade's
//! `try-restart`) keeps them for the next agent, which takes the chain over in place, so no
//! flow ever leaves unmasqueraded between the two.
//!
//! systemd runs the stop half of a restart under the unit's job of type `restart` (a plain stop,
//! a shutdown or a purge under `stop`), visible in `systemctl list-jobs` while the agent handles
//! its SIGTERM. The unit is read from the agent's own cgroup; outside a systemd service (a pod,
//! a shell) there is no unit and nothing is asked. When the answer cannot be had, the stop is
//! taken for a stop: the rules go, as `--cleanup-on-exit` promises.

use std::time::Duration;

/// How long the question to systemd may take; the stop deadline goes on meanwhile.
const ASK_DEADLINE: Duration = Duration::from_secs(2);

/// What systemd is doing to the unit this agent runs in, as far as the stop is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The unit's job is a restart: a new agent follows at once.
    Restart { unit: String },
    /// A stop, no job, or no systemd unit at all.
    Stop,
}

/// The systemd service this process runs in, from `/proc/self/cgroup` (cgroup v2's `0::`
/// line, or v1's `name=systemd` hierarchy): `ipmasq.service` for `/system.slice/ipmasq.service`.
pub fn service_of_cgroup(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if !(controllers.is_empty() || controllers == "name=systemd") {
            return None;
        }
        // A service's main process may sit in a sub-cgroup of it (Delegate=): the innermost
        // `.service` component is the unit.
        path.split('/')
            .rev()
            .find(|part| part.ends_with(".service"))
            .map(str::to_string)
    })
}

/// The type of `unit`'s job in `systemctl list-jobs --no-legend` output (`JOB UNIT TYPE
/// STATE` per line), if it has one.
pub fn job_type<'a>(list_jobs: &'a str, unit: &str) -> Option<&'a str> {
    list_jobs.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_id, job_unit, kind) = (fields.next()?, fields.next()?, fields.next()?);
        (job_unit == unit).then_some(kind)
    })
}

/// Why this process is being stopped, asking systemd (one `systemctl list-jobs`, within
/// [`ASK_DEADLINE`]) only when it runs in a service.
pub fn stop_reason() -> StopReason {
    let Some(unit) = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .as_deref()
        .and_then(service_of_cgroup)
    else {
        return StopReason::Stop;
    };
    let asked = crate::backend::runner::run(
        "systemctl",
        &["list-jobs", "--no-legend", "--no-pager", "--full", &unit],
        None,
        ASK_DEADLINE,
    );
    match asked {
        Ok(out) if out.success => match job_type(&out.stdout, &unit) {
            Some("restart") => StopReason::Restart { unit },
            Some(other) => {
                tracing::debug!(%unit, job = other, "systemd stops the unit");
                StopReason::Stop
            }
            None => StopReason::Stop,
        },
        Ok(out) => {
            tracing::warn!(%unit, stderr = %out.stderr.trim(), "cannot ask systemd whether this stop is a restart; taking it for a stop");
            StopReason::Stop
        }
        Err(err) => {
            tracing::warn!(%unit, error = %err, "cannot ask systemd whether this stop is a restart; taking it for a stop");
            StopReason::Stop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_is_read_from_the_unified_or_the_systemd_hierarchy() {
        assert_eq!(
            service_of_cgroup("0::/system.slice/ipmasq.service\n").as_deref(),
            Some("ipmasq.service")
        );
        let hybrid = "4:memory:/system.slice/ipmasq.service\n1:name=systemd:/system.slice/ipmasq.service\n0::/\n";
        assert_eq!(service_of_cgroup(hybrid).as_deref(), Some("ipmasq.service"));
        assert_eq!(
            service_of_cgroup("0::/system.slice/ipmasq.service/agent\n").as_deref(),
            Some("ipmasq.service")
        );
    }

    #[test]
    fn no_service_outside_systemd() {
        for cgroup in [
            "0::/\n",
            "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-0123.scope\n",
            "0::/user.slice/user-0.slice/session-3.scope\n",
            "4:memory:/system.slice/docker.service\n0::/\n",
            "",
        ] {
            assert_eq!(service_of_cgroup(cgroup), None, "{cgroup:?}");
        }
    }

    #[test]
    fn the_units_job_type_is_found_among_others() {
        let jobs =
            "1021 network-online.target start waiting\n1187 ipmasq.service restart running\n";
        assert_eq!(job_type(jobs, "ipmasq.service"), Some("restart"));
        assert_eq!(job_type(jobs, "network-online.target"), Some("start"));
        assert_eq!(
            job_type("998 ipmasq.service stop running\n", "ipmasq.service"),
            Some("stop")
        );
        assert_eq!(job_type("", "ipmasq.service"), None);
        assert_eq!(
            job_type(
                "12 ipmasq-other.service restart running\n",
                "ipmasq.service"
            ),
            None
        );
    }
}
