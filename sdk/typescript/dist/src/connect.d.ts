/**
 * Connection pools: which node a new client connection should go to, by the pool's
 * SmartConnect-style rule (round robin, connection count, network throughput, CPU).
 */
import type { OracleClient } from "./client.js";
import type { ConnectionAnswer } from "./wire.js";
/** Asks the oracle for the node; the answer holds for `valid_for_ms`. */
export declare function connect(client: OracleClient, pool: string): Promise<ConnectionAnswer>;
