/**
 * Calls between grains, counted locally in bounded memory and handed out in report-sized batches.
 *
 * At most `maxPairs` distinct pairs are kept; calls between pairs beyond that are counted as
 * dropped: the oracle's repartitioner only needs the heavy pairs, and a pair seen early keeps
 * counting. A pair and its reverse are one edge, as the oracle counts them; a grain calling itself
 * is no edge at all.
 */
/** Edges per report: the oracle's limit on one `POST …/edges`. */
export const MAX_EDGES_PER_REPORT = 10_000;
/** Bytes of JSON per report, well inside the oracle's request body limit (1 MiB by default). */
export const MAX_REPORT_BYTES = 768 * 1024;
/** What one edge costs in a report beside its two ids (names, quotes, the count). */
const EDGE_OVERHEAD_BYTES = 48;
/** The largest count of one edge the oracle takes. */
export const MAX_COUNT = 1_000_000_000;
/** Grain names never hold control characters (the spec's pattern), so this joins two safely. */
const SEPARATOR = "\u0000";
export class EdgeCounter {
    maxPairs;
    /** Calls not counted because `maxPairs` pairs were kept already. */
    dropped = 0;
    counts = new Map();
    constructor(maxPairs = 100_000) {
        if (!Number.isInteger(maxPairs) || maxPairs < 1) {
            throw new RangeError("maxPairs must be a whole number, at least 1");
        }
        this.maxPairs = maxPairs;
    }
    record(from, to, calls = 1) {
        if (from === to || !(calls > 0))
            return;
        const key = from < to ? from + SEPARATOR + to : to + SEPARATOR + from;
        const count = this.counts.get(key);
        if (count !== undefined) {
            this.counts.set(key, Math.min(MAX_COUNT, count + calls));
        }
        else if (this.counts.size < this.maxPairs) {
            this.counts.set(key, Math.min(MAX_COUNT, calls));
        }
        else {
            this.dropped += calls;
        }
    }
    /** Distinct pairs kept now. */
    get size() {
        return this.counts.size;
    }
    /** Everything counted so far, emptied, in batches of at most `MAX_EDGES_PER_REPORT`. */
    takeBatches() {
        const counts = this.counts;
        this.counts = new Map();
        const batches = [];
        let batch = [];
        let bytes = 0;
        for (const [key, count] of counts) {
            const cut = key.indexOf(SEPARATOR);
            const cost = Buffer.byteLength(key) - 1 + EDGE_OVERHEAD_BYTES;
            if (batch.length === MAX_EDGES_PER_REPORT || (batch.length > 0 && bytes + cost > MAX_REPORT_BYTES)) {
                batches.push(batch);
                batch = [];
                bytes = 0;
            }
            batch.push({ from: key.slice(0, cut), to: key.slice(cut + 1), count });
            bytes += cost;
        }
        if (batch.length > 0)
            batches.push(batch);
        return batches;
    }
    /** Takes back a batch that could not be reported: counted again, within the bound. */
    putBack(batch) {
        for (const edge of batch) {
            this.record(edge.from, edge.to, edge.count);
        }
    }
}
//# sourceMappingURL=edges.js.map