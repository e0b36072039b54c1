/**
 * A task run every `intervalMs` until stopped. Rounds never overlap (the next is timed from the end
 * of the last, so a slow oracle is not piled on); what a round throws is logged and the next round
 * tries again, because the work (open migrations, counted edges) is still there.
 */
import type { Logger } from "./logger.js";
export declare abstract class Periodic {
    abstract readonly name: string;
    abstract readonly intervalMs: number;
    protected abstract readonly logger: Logger;
    private timer;
    private round;
    private running;
    /** One round; what it returns is for tests and callers that drive rounds themselves. */
    abstract tick(): Promise<unknown>;
    start(): void;
    private schedule;
    private runRound;
    /** Stops after the round under way, if any. */
    stop(): Promise<void>;
}
