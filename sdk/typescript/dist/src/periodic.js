/**
 * A task run every `intervalMs` until stopped. Rounds never overlap (the next is timed from the end
 * of the last, so a slow oracle is not piled on); what a round throws is logged and the next round
 * tries again, because the work (open migrations, counted edges) is still there.
 */
import { OracleError } from "./errors.js";
export class Periodic {
    timer;
    round;
    running = false;
    start() {
        if (this.running)
            return;
        this.running = true;
        this.schedule();
    }
    schedule() {
        this.timer = setTimeout(() => {
            this.round = this.runRound().finally(() => {
                this.round = undefined;
                if (this.running)
                    this.schedule();
            });
        }, this.intervalMs);
    }
    async runRound() {
        try {
            await this.tick();
        }
        catch (error) {
            if (error instanceof OracleError) {
                this.logger.debug(`${this.name}: ${error.message}`);
            }
            else {
                this.logger.warn(`${this.name} failed: ${String(error)}`);
            }
        }
    }
    /** Stops after the round under way, if any. */
    async stop() {
        this.running = false;
        clearTimeout(this.timer);
        this.timer = undefined;
        await this.round;
    }
}
//# sourceMappingURL=periodic.js.map