/** Waiting in async code (kept out of the public types, so that they need no Node declarations). */
export { setTimeout as sleep } from "node:timers/promises";
//# sourceMappingURL=sleep.js.map