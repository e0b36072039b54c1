export const monotonic = () => performance.now();
//# sourceMappingURL=clock.js.map