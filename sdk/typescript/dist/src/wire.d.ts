/**
 * The oracle's answers, as far as the SDK reads them (field names as on the wire). The full
 * schemas are in openapi/openapi.json; a generated client has them all, the SDK needs these.
 */
/** `POST …/placements`: where the grain's activation is, or was just registered. */
export interface PlacementAnswer {
    grain: string;
    silo: string;
    address: string;
    outcome: "existing" | "placed" | "stateless";
    strategy: string;
    /** The activation; null for a stateless worker (never registered). */
    epoch: number | null;
    max_local: number | null;
    explanation: unknown;
}
/** `POST …/heartbeats` (the rest of the silo's view is in `SiloView`). */
export interface HeartbeatAnswer extends SiloView {
    lease_ms: number;
}
export interface DrainProgress {
    remaining_activations: number;
    migrating: number;
    requested_at_ms: number;
}
/** `GET …/silos/{silo}`. */
export interface SiloView {
    silo: string;
    address: string;
    status: "joining" | "active" | "shutting_down" | "dead";
    drain: DrainProgress | null;
    [field: string]: unknown;
}
/** A grain its silo (`from`) is to hand over to `to`: one entry of `GET …/migrations?silo=`. */
export interface Migration {
    id: number;
    grain: string;
    from: string;
    to: string;
    reason: "rebalancer" | "drain" | "repartitioner";
    /** The activation the migration applies to. */
    epoch: number;
    created_at_ms: number;
}
export interface MigrationPage {
    migrations: Migration[];
    next_cursor: number | null;
}
/** `POST …/migrations/{id}/complete`: the grain is now activation `epoch` on `migration.to`. */
export interface MigrationCompleted {
    epoch: number;
    migration: Migration;
}
/** `POST …/pools/{pool}/connections`. */
export interface ConnectionAnswer {
    silo: string;
    address: string;
    rule: string;
    valid_for_ms: number;
    explanation: unknown;
}
/** `POST …/edges`. */
export interface EdgesAccepted {
    accepted: number;
    ignored: number;
    dropped: number;
}
/** What a silo's host reports with each heartbeat (every field optional: absent = no figure). */
export interface Load {
    cpu_usage?: number | null;
    memory_usage_bytes?: number | null;
    max_available_memory_bytes?: number | null;
    activation_count?: number | null;
    recent_activation_count?: number | null;
    connection_count?: number | null;
    network_bytes_per_second?: number | null;
    overloaded?: boolean;
}
