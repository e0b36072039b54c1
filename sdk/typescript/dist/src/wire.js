/**
 * The oracle's answers, as far as the SDK reads them (field names as on the wire). The full
 * schemas are in openapi/openapi.json; a generated client has them all, the SDK needs these.
 */
export {};
//# sourceMappingURL=wire.js.map