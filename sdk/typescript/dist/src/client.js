/**
 * The HTTP side: one cluster's routes on any of the oracle's replicas, with a cluster key.
 *
 * The oracle's replicas are interchangeable (state lives in Postgres), so a replica that does not
 * answer, or answers 503 (load shed, or its store unreachable) or 502 or 504 (a proxy in front of
 * it could not reach it), is left for the next one at once;
 * what the last one said is what the caller gets. The replica that answered is asked first next
 * time, so a healthy cluster talks to one replica and a failed one costs one attempt per call.
 */
import { OracleError, UNAVAILABLE, problemOf } from "./errors.js";
import { consoleLogger } from "./logger.js";
export class OracleClient {
    urls;
    cluster;
    timeoutMs;
    logger;
    headers;
    fetch;
    preferred = 0;
    constructor(urls, cluster, options = {}) {
        const list = typeof urls === "string" ? [urls] : [...urls];
        if (list.length === 0) {
            throw new RangeError("at least one oracle URL");
        }
        this.urls = list.map((url) => url.replace(/\/+$/, ""));
        this.cluster = cluster;
        this.timeoutMs = options.timeoutMs ?? 2_000;
        this.logger = options.logger ?? consoleLogger;
        this.headers = { accept: "application/json, application/problem+json" };
        if (options.key) {
            this.headers["authorization"] = `Bearer ${options.key}`;
        }
        this.fetch = options.fetch ?? ((url, init) => globalThis.fetch(url, init));
    }
    /** The cluster's path for `rest` (which starts with `/` and is already percent-encoded). */
    path(rest) {
        return `/v1/clusters/${encodeURIComponent(this.cluster)}${rest}`;
    }
    /**
     * Sends to the preferred replica, then to each other one while they fail; throws `OracleError`
     * for a problem, or (status 0) when none answers. Any route of the cluster can be reached this
     * way, with the same failover and problems.
     */
    async call(method, rest, options = {}) {
        const query = options.params ? `?${new URLSearchParams(stringify(options.params))}` : "";
        const headers = { ...this.headers, ...options.headers };
        const init = { method, headers };
        if (options.body !== undefined) {
            init.body = JSON.stringify(options.body);
            headers["content-type"] = "application/json";
        }
        const waitMs = Math.min(options.attemptTimeoutMs ?? this.timeoutMs, this.timeoutMs);
        let failure;
        for (let turn = 0; turn < this.urls.length; turn++) {
            const index = (this.preferred + turn) % this.urls.length;
            const url = `${this.urls[index]}${this.path(rest)}${query}`;
            let response;
            let text;
            try {
                response = await this.fetch(url, { ...init, signal: AbortSignal.timeout(waitMs) });
                if (UNAVAILABLE.has(response.status) && turn + 1 < this.urls.length) {
                    failure = await problemOf(response);
                    this.logger.debug(`oracle ${this.urls[index]} answered ${response.status} (${failure.problem})`);
                    continue;
                }
                this.preferred = index;
                if (response.status >= 400) {
                    throw await problemOf(response);
                }
                text = await response.text();
            }
            catch (error) {
                if (error instanceof OracleError) {
                    throw error;
                }
                this.logger.debug(`oracle ${this.urls[index]} unreachable: ${String(error)}`);
                failure = new OracleError(0, "unreachable", String(error));
                continue;
            }
            return { status: response.status, body: parse(response.status, text) };
        }
        throw failure ?? new OracleError(0, "unreachable", "no oracle URL answered");
    }
}
function stringify(params) {
    return Object.fromEntries(Object.entries(params).map(([name, value]) => [name, String(value)]));
}
function parse(status, text) {
    if (text === "") {
        return null;
    }
    try {
        return JSON.parse(text);
    }
    catch {
        throw new OracleError(status, "invalid-response", `not JSON: ${text.slice(0, 200)}`);
    }
}
//# sourceMappingURL=client.js.map