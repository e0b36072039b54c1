//! A rio-rs server wired to the oracle: its silo (membership and lease), the gate, the
//! migration worker, and rio-rs's `Server` built with the oracle's placement, membership and
//! cluster provider.
//!
//! [`OracleNode::join`] binds the listener and joins the cluster (the silo is `active` and holds
//! its lease when it returns); [`OracleNode::run`] runs rio-rs's server until the silo leaves.
//! [`NodeHandle::drain`] is a planned shutdown: the oracle moves every object away (the worker
//! hands each over), then the silo leaves and the server stops.

use std::sync::Arc;
use std::time::Duration;

use placement_oracle_sdk::{
    ClientOptions, Description, Load, MigrationWorker, OracleClient, OracleError, Placement, Silo,
    SiloOptions,
};
use rio_rs::app_data::AppData;
use rio_rs::errors::ServerError;
use rio_rs::registry::Registry;
use rio_rs::server::Server;
use tokio::net::TcpListener;

use crate::fence::{Activations, FenceHandle, NoObserver, Observer};
use crate::gate::Gate;
use crate::membership::{OracleClusterProvider, OracleMembership};
use crate::placement::OraclePlacement;

/// rio-rs's server, on the oracle.
pub type OracleServer = Server<OracleMembership, OracleClusterProvider, OraclePlacement>;

/// How a node reaches the oracle and presents itself.
pub struct NodeOptions {
    /// The oracle's replicas (`http://host:port`), tried in turn.
    pub oracle_urls: Vec<String>,
    pub cluster: String,
    /// A cluster key with the `silo` scope (and `operator` for drains); `None` in open mode.
    pub key: Option<String>,
    /// Where rio-rs's server listens.
    pub listen: String,
    /// The address registered with the oracle: what clients dial and redirects carry. By
    /// default the listener's own address.
    pub advertise: Option<String>,
    /// The object types this server hosts (rio-rs type names); the oracle places only these here.
    pub object_types: Vec<String>,
    pub heartbeat_interval: Duration,
    pub migration_poll: Duration,
    pub join_timeout: Duration,
    /// Longest wait for one answer of the oracle.
    pub request_timeout: Duration,
    /// How long a hand-over waits for an object's calls in flight before it is put off.
    pub hand_over_wait: Duration,
    /// The silo's first generation (by default the wall clock in ms: a restart is a new
    /// incarnation).
    pub generation: Option<u64>,
    /// Told when activations start and end.
    pub observer: Arc<dyn Observer>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            oracle_urls: vec!["http://127.0.0.1:8080".into()],
            cluster: "demo".into(),
            key: None,
            listen: "127.0.0.1:0".into(),
            advertise: None,
            object_types: Vec::new(),
            heartbeat_interval: Duration::from_secs(1),
            migration_poll: Duration::from_millis(500),
            join_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(3),
            hand_over_wait: Duration::from_secs(2),
            generation: None,
            observer: Arc::new(NoObserver),
        }
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        source: std::io::Error,
    },
    #[error("the oracle: {0}")]
    Oracle(#[from] OracleError),
    #[error("rio-rs: {0:?}")]
    Server(ServerError),
}

/// What outside code keeps of a running node; cheap to clone.
#[derive(Clone)]
pub struct NodeHandle {
    silo: Silo,
    gate: Arc<Gate>,
    migration_poll: Duration,
}

impl NodeHandle {
    pub fn silo(&self) -> &Silo {
        &self.silo
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// A planned shutdown: asks the oracle to move every object away (the node's migration
    /// worker hands each over meanwhile), waits until none is left or `deadline`, then leaves;
    /// rio-rs's server stops. Returns how many registrations were left when it left.
    pub async fn drain(&self, deadline: Duration) -> Result<u64, OracleError> {
        self.silo.stop(deadline, self.migration_poll).await
    }

    /// Leaves at once (the oracle releases whatever is still registered); the server stops.
    pub async fn leave(&self) -> Result<(), OracleError> {
        self.silo.leave().await
    }
}

/// A rio-rs server that has joined the cluster, not yet serving.
pub struct OracleNode {
    listener: TcpListener,
    handle: NodeHandle,
    worker: MigrationWorker<Gate>,
    placement: OraclePlacement,
    membership: OracleMembership,
    advertise: String,
}

impl OracleNode {
    /// Binds the listener and joins the cluster as a silo at the advertised address.
    pub async fn join(options: NodeOptions) -> Result<Self, NodeError> {
        let listener =
            TcpListener::bind(&options.listen)
                .await
                .map_err(|source| NodeError::Listen {
                    address: options.listen.clone(),
                    source,
                })?;
        // The address rio-rs's service calls its own (the first non-loopback address it finds,
        // with the listener's port): a lookup answers it for objects that run here.
        let service_address = OracleServer::try_local_addr(&listener)
            .map_err(NodeError::Server)?
            .to_string();
        let advertise = match &options.advertise {
            Some(address) => address.clone(),
            None => listener
                .local_addr()
                .map_err(|source| NodeError::Listen {
                    address: options.listen.clone(),
                    source,
                })?
                .to_string(),
        };
        let client = OracleClient::new(
            &options.oracle_urls,
            &options.cluster,
            ClientOptions {
                key: options.key.clone(),
                timeout: options.request_timeout,
                first_replica: 0,
            },
        )?;
        let gate = Gate::new(Activations::new(options.observer), options.hand_over_wait);
        let counted = Arc::downgrade(&gate);
        let load = move || Load {
            activation_count: counted.upgrade().map(|g| g.held() as u64),
            ..Load::default()
        };
        let silo = Silo::new(
            client.clone(),
            &advertise,
            SiloOptions {
                generation: options.generation,
                description: Description {
                    grain_types: Some(options.object_types.clone()),
                    ..Description::default()
                },
                interval: options.heartbeat_interval,
                load: Arc::new(load),
                events: gate.events(),
                ..SiloOptions::default()
            },
        );
        gate.attach_silo(silo.clone());
        silo.join(options.join_timeout).await?;
        let worker = MigrationWorker::new(&silo, gate.clone());
        worker.start(options.migration_poll);
        let placement =
            OraclePlacement::new(gate.clone(), Placement::for_silo(&silo), service_address);
        Ok(Self {
            listener,
            handle: NodeHandle {
                silo,
                gate,
                migration_poll: options.migration_poll,
            },
            worker,
            placement,
            membership: OracleMembership::for_server(client),
            advertise,
        })
    }

    /// The address the oracle knows this server by.
    pub fn address(&self) -> &str {
        &self.advertise
    }

    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// Runs rio-rs's server with the application's `registry` and `app_data` (the gate is added
    /// to it, for [`crate::admit`]) until the silo leaves.
    pub async fn run(self, registry: Registry, app_data: AppData) -> Result<(), NodeError> {
        let gate = self.handle.gate.clone();
        app_data.set(FenceHandle(gate.clone()));
        let mut server: OracleServer = Server::builder()
            .registry(registry)
            .app_data(app_data)
            .cluster_provider(OracleClusterProvider::new(self.membership, gate))
            .object_placement_provider(self.placement)
            .build();
        let ran = server.run(self.listener).await;
        self.worker.stop();
        self.handle.silo.close();
        ran.map_err(NodeError::Server)
    }
}
