/**
 * Where the SDK says what it does. A runtime usually has a logger of its own (pino, winston, …):
 * anything with `debug`, `info` and `warn` taking a message and values will do, `console` included.
 */
export interface Logger {
    debug(message: string, ...values: unknown[]): void;
    info(message: string, ...values: unknown[]): void;
    warn(message: string, ...values: unknown[]): void;
}
/**
 * The default: `console`, quiet at debug. Failed heartbeats and unreachable replicas are logged at
 * debug because they are expected during an outage; what a runtime must know about (a lost lease,
 * a death) is a warning.
 */
export declare const consoleLogger: Logger;
/** Says nothing: for tests, or a runtime that reads the SDK's state instead. */
export declare const silentLogger: Logger;
