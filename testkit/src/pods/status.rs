//! Pure pod-status logic: what the simulated kubelet wants a pod's status to say, whether
//! the stored status already says it, and the status to write when it does not.

use k8s_openapi::{
    api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition,
        PodIP, PodStatus,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};

/// What the simulator decides for a running (or stopping) pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host_ip: String,
    pub(crate) pod_ip: String,
    /// `Ready`, `ContainersReady` and every container's `ready`.
    pub(crate) ready: bool,
}

/// The part of a pod's status the simulator owns; equal facts mean no write is needed.
#[derive(Debug, PartialEq, Eq)]
struct Facts<'a> {
    phase: Option<&'a str>,
    host_ip: Option<&'a str>,
    pod_ip: Option<&'a str>,
    /// `(type, status == "True")` of the conditions in [`condition_targets`], in that order.
    conditions: Vec<(&'a str, bool)>,
    /// `(name, ready, running)` of every container.
    containers: Vec<(&'a str, bool, bool)>,
}

const RUNNING: &str = "Running";

fn condition_targets(ready: bool) -> [(&'static str, bool); 4] {
    [
        ("PodScheduled", true),
        ("Initialized", true),
        ("ContainersReady", ready),
        ("Ready", ready),
    ]
}

fn spec_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map_or(&[], |spec| spec.containers.as_slice())
}

fn observed(pod: &Pod) -> Facts<'_> {
    let status = pod.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let condition_is_true = |type_: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    Facts {
        phase: status.and_then(|s| s.phase.as_deref()),
        host_ip: status.and_then(|s| s.host_ip.as_deref()),
        pod_ip: status.and_then(|s| s.pod_ip.as_deref()),
        conditions: condition_targets(false)
            .iter()
            .map(|(type_, _)| (*type_, condition_is_true(type_)))
            .collect(),
        containers: status
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
                (c.name.as_str(), c.ready, running)
            })
            .collect(),
    }
}

fn desired<'a>(pod: &'a Pod, target: &'a Target) -> Facts<'a> {
    Facts {
        phase: Some(RUNNING),
        host_ip: Some(&target.host_ip),
        pod_ip: Some(&target.pod_ip),
        conditions: condition_targets(target.ready).to_vec(),
        containers: spec_containers(pod)
            .iter()
            .map(|c| (c.name.as_str(), target.ready, true))
            .collect(),
    }
}

/// Whether the pod's stored status already says what `target` wants.
pub(crate) fn is_current(pod: &Pod, target: &Target) -> bool {
    observed(pod) == desired(pod, target)
}

/// The pod IP the pod already reports, kept across simulator restarts.
pub(crate) fn existing_pod_ip(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.pod_ip.as_deref()
}

/// The whole status to write: the stored one with the simulator's facts applied. Conditions
/// whose status does not change keep their `lastTransitionTime`; `startTime` and container
/// start times are kept once set.
pub(crate) fn render(pod: &Pod, target: &Target, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    status.phase = Some(RUNNING.into());
    status.host_ip = Some(target.host_ip.clone());
    status.pod_ip = Some(target.pod_ip.clone());
    status.pod_ips = Some(vec![PodIP {
        ip: target.pod_ip.clone(),
    }]);
    status.start_time.get_or_insert_with(|| now.clone());

    let mut conditions = status.conditions.take().unwrap_or_default();
    for (type_, value) in condition_targets(target.ready) {
        set_condition(&mut conditions, type_, value, now);
    }
    status.conditions = Some(conditions);

    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let previous = status.container_statuses.take().unwrap_or_default();
    status.container_statuses = Some(
        spec_containers(pod)
            .iter()
            .map(|container| {
                let old = previous.iter().find(|s| s.name == container.name);
                container_status(container, old, uid, target.ready, now)
            })
            .collect(),
    );
    status
}

fn set_condition(conditions: &mut Vec<PodCondition>, type_: &str, value: bool, now: &Time) {
    let status = if value { "True" } else { "False" };
    let reason = (!value).then(|| "ContainersNotReady".to_owned());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) if existing.status == status => {}
        Some(existing) => {
            existing.status = status.into();
            existing.reason = reason;
            existing.message = None;
            existing.last_transition_time = Some(now.clone());
        }
        None => conditions.push(PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason,
            last_transition_time: Some(now.clone()),
            ..PodCondition::default()
        }),
    }
}

fn container_status(
    container: &Container,
    old: Option<&ContainerStatus>,
    uid: &str,
    ready: bool,
    now: &Time,
) -> ContainerStatus {
    let image = container.image.clone().unwrap_or_default();
    let started_at = old
        .and_then(|s| s.state.as_ref()?.running.as_ref()?.started_at.clone())
        .unwrap_or_else(|| now.clone());
    ContainerStatus {
        name: container.name.clone(),
        image_id: format!("sim://{image}"),
        image,
        container_id: Some(format!("sim://{uid}/{}", container.name)),
        ready,
        started: Some(true),
        restart_count: old.map_or(0, |s| s.restart_count),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at),
            }),
            ..ContainerState::default()
        }),
        last_state: old.and_then(|s| s.last_state.clone()),
        ..ContainerStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{api::core::v1::PodSpec, jiff::Timestamp};

    use super::*;

    fn pod(containers: &[&str]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.spec = Some(PodSpec {
            containers: containers
                .iter()
                .map(|name| Container {
                    name: (*name).into(),
                    image: Some("registry.invalid/sim:1".into()),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        });
        pod
    }

    fn target(ready: bool) -> Target {
        Target {
            host_ip: "10.99.0.1".into(),
            pod_ip: "10.100.0.1".into(),
            ready,
        }
    }

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        let found = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_);
        found.unwrap_or_else(|| panic!("no {type_} condition"))
    }

    #[test]
    fn a_new_pod_needs_a_write_and_the_rendered_status_is_current() {
        let mut p = pod(&["app", "sidecar"]);
        assert!(!is_current(&p, &target(true)));
        let status = render(&p, &target(true), &at(100));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(
            status.pod_ips,
            Some(vec![PodIP {
                ip: "10.100.0.1".into()
            }])
        );
        assert_eq!(status.host_ip.as_deref(), Some("10.99.0.1"));
        assert_eq!(status.start_time, Some(at(100)));
        let containers = status.container_statuses.clone().unwrap_or_default();
        assert_eq!(containers.len(), 2);
        assert!(
            containers
                .iter()
                .all(|c| c.ready && c.started == Some(true))
        );
        assert_eq!(
            containers[1].container_id.as_deref(),
            Some("sim://u1/sidecar")
        );
        p.status = Some(status);
        assert!(is_current(&p, &target(true)));
        assert!(!is_current(&p, &target(false)));
    }

    #[test]
    fn readiness_flip_touches_only_the_readiness_conditions() {
        let mut p = pod(&["app"]);
        p.status = Some(render(&p, &target(true), &at(100)));
        let status = render(&p, &target(false), &at(200));
        assert_eq!(condition(&status, "Ready").status, "False");
        assert_eq!(
            condition(&status, "Ready").last_transition_time,
            Some(at(200))
        );
        assert_eq!(
            condition(&status, "ContainersReady").reason.as_deref(),
            Some("ContainersNotReady")
        );
        assert_eq!(
            condition(&status, "PodScheduled").last_transition_time,
            Some(at(100))
        );
        assert_eq!(status.start_time, Some(at(100)));
        let container = &status.container_statuses.clone().unwrap_or_default()[0];
        assert!(!container.ready);
        let started = container.state.as_ref().and_then(|s| s.running.as_ref());
        assert_eq!(started.and_then(|r| r.started_at.clone()), Some(at(100)));
        p.status = Some(status);
        assert!(is_current(&p, &target(false)));
        assert_eq!(existing_pod_ip(&p), Some("10.100.0.1"));
    }

    #[test]
    fn conditions_set_by_others_are_kept_and_ours_are_replaced() {
        let mut p = pod(&["app"]);
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            qos_class: Some("BestEffort".into()),
            conditions: Some(vec![
                PodCondition {
                    type_: "PodScheduled".into(),
                    status: "True".into(),
                    last_transition_time: Some(at(50)),
                    ..PodCondition::default()
                },
                PodCondition {
                    type_: "example.com/gate".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                },
            ]),
            ..PodStatus::default()
        });
        let status = render(&p, &target(true), &at(100));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
        assert_eq!(
            condition(&status, "PodScheduled").last_transition_time,
            Some(at(50))
        );
        assert_eq!(condition(&status, "example.com/gate").status, "True");
        assert_eq!(status.conditions.iter().flatten().count(), 5);
    }
}
