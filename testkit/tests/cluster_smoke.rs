//! Smoke tests of the real Kubernetes test cluster (`testkit::cluster`): what the operator and
//! kube-runtime rely on, checked against kube-apiserver and kube-controller-manager v1.20.2.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use testkit::cluster::with_namespace;

#[tokio::test]
async fn configmap_round_trip() {
    with_namespace("smoke-cm", |client, ns| async move {
        let api: Api<ConfigMap> = Api::namespaced(client, &ns);
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("probe".into()),
                ..ObjectMeta::default()
            },
            data: Some([("k".to_string(), "v".to_string())].into()),
            ..ConfigMap::default()
        };
        api.create(&PostParams::default(), &cm).await.unwrap();
        let read = api.get("probe").await.unwrap();
        assert_eq!(read.data.unwrap()["k"], "v");
    })
    .await;
}
