/**
 * A task run every `intervalMs` until stopped. Rounds never overlap (the next is timed from the end
 * of the last, so a slow oracle is not piled on); what a round throws is logged and the next round
 * tries again, because the work (open migrations, counted edges) is still there.
 */

import { OracleError } from "./errors.js";
import type { Logger } from "./logger.js";

export abstract class Periodic {
  abstract readonly name: string;
  abstract readonly intervalMs: number;
  protected abstract readonly logger: Logger;
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private running = false;

  /** One round; what it returns is for tests and callers that drive rounds themselves. */
  abstract tick(): Promise<unknown>;

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule();
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.round = this.runRound().finally(() => {
        this.round = undefined;
        if (this.running) this.schedule();
      });
    }, this.intervalMs);
  }

  private async runRound(): Promise<void> {
    try {
      await this.tick();
    } catch (error) {
      if (error instanceof OracleError) {
        this.logger.debug(`${this.name}: ${error.message}`);
      } else {
        this.logger.warn(`${this.name} failed: ${String(error)}`);
      }
    }
  }

  /** Stops after the round under way, if any. */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.round;
  }
}
