const PREFIX = "placement-oracle-sdk:";
/**
 * The default: `console`, quiet at debug. Failed heartbeats and unreachable replicas are logged at
 * debug because they are expected during an outage; what a runtime must know about (a lost lease,
 * a death) is a warning.
 */
export const consoleLogger = {
    debug() { },
    info(message, ...values) {
        console.info(PREFIX, message, ...values);
    },
    warn(message, ...values) {
        console.warn(PREFIX, message, ...values);
    },
};
/** Says nothing: for tests, or a runtime that reads the SDK's state instead. */
export const silentLogger = {
    debug() { },
    info() { },
    warn() { },
};
//# sourceMappingURL=logger.js.map