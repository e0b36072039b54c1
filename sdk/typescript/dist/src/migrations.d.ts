/**
 * Carrying out the migrations the oracle issues for a silo (rebalancer, repartitioner, drain).
 *
 * Each round reads the silo's open migrations and hands each grain over through `handOver` (state
 * transfer is the runtime's): true when the target has the grain's state, false when it could not
 * be handed over, null while the hand-over is still under way (the migration stays open and is
 * offered again next round). Then the worker completes the migration (the target now holds the
 * registration, under the epoch the completion returns, passed to `onMoved`) or fails it (the
 * grain stays). Retries are safe: the oracle answers a repeated completion with its first answer,
 * and a migration it ended otherwise (`migration-ended`, `migration-refused`, or gone) is done
 * with; `onRefused` hears of a completion refused so, because the state handed to the target must
 * then not be activated there.
 */
import type { OracleClient } from "./client.js";
import { OracleError } from "./errors.js";
import type { Logger } from "./logger.js";
import { Periodic } from "./periodic.js";
import type { Silo } from "./silo.js";
import type { Migration } from "./wire.js";
/** Moves one grain's state to `migration.to`: true done, false could not, null still under way. */
export type HandOver = (migration: Migration) => boolean | null | Promise<boolean | null>;
export interface MigrationWorkerOptions {
    /** A completion moved the grain: it is activation `epoch` on `migration.to`. */
    onMoved?: (migration: Migration, epoch: number) => void;
    /** The oracle refused a completion (the migration no longer applied): drop what was handed over. */
    onRefused?: (migration: Migration, error: OracleError) => void;
    /** Between rounds, ms (500 by default). */
    intervalMs?: number;
    logger?: Logger;
}
export declare class MigrationWorker extends Periodic {
    readonly name = "migrations";
    readonly intervalMs: number;
    protected readonly logger: Logger;
    readonly client: OracleClient;
    readonly silo: Silo;
    /** Migrations this worker completed, failed (the grain stayed), and saw refused. */
    completed: number;
    failed: number;
    refused: number;
    private readonly handOver;
    private readonly onMoved;
    private readonly onRefused;
    constructor(client: OracleClient, silo: Silo, handOver: HandOver, options?: MigrationWorkerOptions);
    tick(): Promise<number>;
    /** Carries out the silo's open migrations (one page); resolves how many it ended. */
    pollOnce(): Promise<number>;
    /** Says whether the migration is over (false: still under way). */
    private end;
}
