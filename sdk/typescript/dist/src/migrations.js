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
import { OracleError } from "./errors.js";
import { Periodic } from "./periodic.js";
/** Problems that mean the oracle already ended the migration: nothing is left to do. */
const ENDED = new Set(["migration-ended", "migration-refused"]);
export class MigrationWorker extends Periodic {
    name = "migrations";
    intervalMs;
    logger;
    client;
    silo;
    /** Migrations this worker completed, failed (the grain stayed), and saw refused. */
    completed = 0;
    failed = 0;
    refused = 0;
    handOver;
    onMoved;
    onRefused;
    constructor(client, silo, handOver, options = {}) {
        super();
        this.client = client;
        this.silo = silo;
        this.handOver = handOver;
        this.onMoved = options.onMoved ?? (() => { });
        this.onRefused = options.onRefused ?? (() => { });
        this.intervalMs = options.intervalMs ?? 500;
        this.logger = options.logger ?? client.logger;
    }
    tick() {
        return this.pollOnce();
    }
    /** Carries out the silo's open migrations (one page); resolves how many it ended. */
    async pollOnce() {
        const { body } = await this.client.call("GET", "/migrations", {
            params: { silo: this.silo.siloId },
        });
        let ended = 0;
        for (const migration of body.migrations) {
            if (await this.end(migration))
                ended += 1;
        }
        return ended;
    }
    /** Says whether the migration is over (false: still under way). */
    async end(migration) {
        const moved = await this.handOver(migration);
        if (moved === null)
            return false;
        const verb = moved ? "complete" : "fail";
        let answer;
        try {
            // No body: these routes take none, and the oracle closes a keep-alive connection whose
            // request body it did not read, which fails the next call sent on it.
            answer = await this.client.call("POST", `/migrations/${migration.id}/${verb}`);
        }
        catch (error) {
            if (error instanceof OracleError && (ENDED.has(error.problem) || error.status === 404)) {
                this.logger.info(`migration ${migration.id} of ${migration.grain}: ${error.detail}`);
                if (moved) {
                    this.refused += 1;
                    this.onRefused(migration, error);
                }
                return true;
            }
            throw error;
        }
        if (moved) {
            this.completed += 1;
            this.onMoved(migration, answer.body.epoch);
        }
        else {
            this.failed += 1;
        }
        return true;
    }
}
//# sourceMappingURL=migrations.js.map