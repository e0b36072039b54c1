// Not built here (this repository has no .NET toolchain): written against Orleans 8/9 (Microsoft.Orleans.Server).
// examples/orleans/README.md says what the three files cover and what could not be checked.
//
// This file: the options, the oracle's ids for silos and grains, the HTTP calls, and OracleSilo — the silo's
// membership in the oracle: it joins (`joining`, then `active` once Orleans is), heartbeats on a timer with each
// heartbeat on its own task, keeps the lease (grains run only while the last acknowledged heartbeat's `lease_ms`,
// counted from when that heartbeat was sent, holds), rejoins as the next incarnation when told it is dead, drains on
// shutdown and leaves once Orleans has stopped its grains.

using System.Diagnostics;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans;
using Orleans.Runtime;
using Orleans.Statistics;

namespace PlacementOracle.Orleans;

public sealed class OracleOptions
{
    public string Cluster { get; set; } = "demo";
    /// <summary>A cluster key with the <c>silo</c> and <c>operator</c> scopes (the drain needs the latter); empty in open mode.</summary>
    public string Key { get; set; } = "";
    public TimeSpan HeartbeatPeriod { get; set; } = TimeSpan.FromSeconds(1);
    /// <summary>How long a shutdown waits for the drain's migrations before it lets Orleans stop the rest.</summary>
    public TimeSpan DrainDeadline { get; set; } = TimeSpan.FromSeconds(30);
    /// <summary>How long a call to a grain waits while the silo's lease has run out, before it fails.</summary>
    public TimeSpan PausedCallWait { get; set; } = TimeSpan.FromSeconds(5);
    /// <summary>How long an activation may take to go idle and leave for a migration's target before the migration is failed.</summary>
    public TimeSpan MigrationDeadline { get; set; } = TimeSpan.FromSeconds(30);
}

/// <summary>
/// The oracle's id of a silo incarnation, <c>ip:port@generation</c>: Orleans' generation × 1000 plus how many times the
/// oracle declared this process dead (a dead id is retired for ever, so each rejoin is a new incarnation while Orleans'
/// <see cref="SiloAddress"/> stays). Any incarnation maps back to the same <see cref="SiloAddress"/>.
/// </summary>
public static class OracleIds
{
    public static string Silo(SiloAddress silo, int incarnation) =>
        $"{silo.Endpoint}@{silo.Generation * 1000L + incarnation}";

    public static SiloAddress ToSiloAddress(string id)
    {
        var at = id.LastIndexOf('@');
        return SiloAddress.New(IPEndPoint.Parse(id[..at]), (int)(long.Parse(id[(at + 1)..]) / 1000));
    }

    /// <summary><c>type/key</c>: the type picks the policy's strategy for the grain.</summary>
    public static string Grain(GrainId grain) => $"{grain.Type}/{grain.Key}";
}

public sealed record OracleAnswer(int Status, JsonElement Body, string? Problem, TimeSpan? RetryAfter)
{
    public bool Ok => Status is >= 200 and < 300;
    public string Text(string name) => Body.GetProperty(name).GetString()!;
    public long Number(string name) => Body.GetProperty(name).GetInt64();
}

public sealed class OracleException(OracleAnswer answer)
    : Exception($"the oracle answered {answer.Status} {answer.Problem}");

/// <summary>One cluster's routes, through the named HttpClient "placement-oracle" (a balancer in front of the replicas).</summary>
public sealed class OracleHttp(IHttpClientFactory http, IOptions<OracleOptions> options)
{
    public async Task<OracleAnswer> SendAsync(HttpMethod method, string path, object? body = null, CancellationToken ct = default)
    {
        using var message = new HttpRequestMessage(method, $"v1/clusters/{Uri.EscapeDataString(options.Value.Cluster)}{path}");
        if (body is not null) message.Content = JsonContent.Create(body); // routes that take no body get none
        if (options.Value.Key.Length > 0) message.Headers.Authorization = new("Bearer", options.Value.Key);
        using var response = await http.CreateClient("placement-oracle").SendAsync(message, ct);
        var text = await response.Content.ReadAsStringAsync(ct);
        var json = default(JsonElement);
        if (text.Length > 0)
        {
            using var document = JsonDocument.Parse(text);
            json = document.RootElement.Clone();
        }
        // Problems (RFC 9457) name their type's last segment: silo-declared-dead, migration-refused, …
        var problem = !response.IsSuccessStatusCode && json.ValueKind == JsonValueKind.Object && json.TryGetProperty("type", out var type)
            ? type.GetString()?.Split(':')[^1] : null;
        return new((int)response.StatusCode, json, problem, response.Headers.RetryAfter?.Delta);
    }

    public static string Escape(string value) => Uri.EscapeDataString(value);
}

/// <summary>The silo's membership and lease in the oracle. Orleans' own membership runs beside it; a grain runs only
/// while <see cref="MayRunGrains"/>.</summary>
public sealed class OracleSilo(
    OracleHttp oracle, IOptions<OracleOptions> options, ILocalSiloDetails local,
    IEnvironmentStatisticsProvider statistics, IActivationWorkingSet workingSet, ILogger<OracleSilo> log)
    : ILifecycleParticipant<ISiloLifecycle>
{
    private readonly object _lock = new();
    private readonly CancellationTokenSource _stopping = new();
    private long _leaseUntil; // Stopwatch timestamp; 0 = not held
    private long _quietUntil; // no heartbeat before this (Retry-After)
    private int _incarnation;
    private string _status = "joining";
    private bool _active, _paused, _dropping;
    private TaskCompletionSource _leaseHeld = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>Told <c>silo-declared-dead</c>: every grain must be dropped; awaited before the silo rejoins.</summary>
    public Func<Task> DropAllGrains { get; set; } = () => Task.CompletedTask;

    public SiloAddress Address => local.SiloAddress;

    public string Id { get { lock (_lock) return OracleIds.Silo(local.SiloAddress, _incarnation); } }

    public bool MayRunGrains { get { lock (_lock) return Stopwatch.GetTimestamp() < _leaseUntil; } }

    public void Participate(ISiloLifecycle lifecycle)
    {
        // Joins before grains can activate; leaves after Orleans has deactivated them (BecomeActive's stop).
        lifecycle.Subscribe(nameof(OracleSilo), ServiceLifecycleStage.RuntimeGrainServices, JoinAsync, LeaveAsync);
        // Active once Orleans is; on shutdown the drain runs first, while grains still run and migrations can leave.
        lifecycle.Subscribe(nameof(OracleSilo), ServiceLifecycleStage.Active, BecomeActiveAsync, DrainAsync);
    }

    /// <summary>True at once while the lease holds; else waits up to <paramref name="wait"/> for an acknowledged heartbeat.</summary>
    public async Task<bool> WaitForLeaseAsync(TimeSpan wait)
    {
        Task held;
        lock (_lock)
        {
            if (Stopwatch.GetTimestamp() < _leaseUntil) return true;
            if (_leaseHeld.Task.IsCompleted) _leaseHeld = new(TaskCreationOptions.RunContinuationsAsynchronously);
            held = _leaseHeld.Task;
        }
        await Task.WhenAny(held, Task.Delay(wait));
        return MayRunGrains;
    }

    private async Task JoinAsync(CancellationToken ct)
    {
        while (!await BeatQuietlyAsync(ct)) await Task.Delay(TimeSpan.FromSeconds(1), ct);
        _ = RunAsync(_stopping.Token);
    }

    private async Task BecomeActiveAsync(CancellationToken ct)
    {
        lock (_lock) { _active = true; _status = "active"; }
        await BeatQuietlyAsync(ct);
    }

    private async Task RunAsync(CancellationToken stopping)
    {
        using var timer = new PeriodicTimer(options.Value.HeartbeatPeriod);
        try
        {
            while (await timer.WaitForNextTickAsync(stopping))
            {
                // Each heartbeat on its own: a slow one does not hold back the next.
                if (Stopwatch.GetTimestamp() >= Interlocked.Read(ref _quietUntil)) _ = BeatQuietlyAsync(stopping);
                bool lapsed;
                lock (_lock)
                {
                    lapsed = !_paused && _leaseUntil != 0 && Stopwatch.GetTimestamp() >= _leaseUntil;
                    _paused |= lapsed;
                }
                if (lapsed) log.LogWarning("Silo {Silo} lost its lease: its grains pause (calls wait, nothing activates)", Id);
            }
        }
        catch (OperationCanceledException) { }
    }

    private async Task<bool> BeatQuietlyAsync(CancellationToken ct)
    {
        try { return await BeatAsync(ct); }
        catch (Exception e) when (e is HttpRequestException or TaskCanceledException)
        {
            log.LogDebug(e, "A heartbeat got no answer; the lease runs out unless another one is acknowledged");
            return false;
        }
    }

    /// <summary>One heartbeat; true when acknowledged.</summary>
    private async Task<bool> BeatAsync(CancellationToken ct)
    {
        var sentAt = Stopwatch.GetTimestamp(); // the lease counts from the send
        string id, status;
        lock (_lock)
        {
            if (_dropping) return false; // told dead: the grains stop before the next incarnation joins
            id = OracleIds.Silo(local.SiloAddress, _incarnation);
            status = _status;
        }
        var stats = statistics.GetEnvironmentStatistics();
        var answer = await oracle.SendAsync(HttpMethod.Post, "/heartbeats", new Dictionary<string, object>
        {
            ["silo"] = id,
            ["status"] = status,
            ["cpu_usage"] = Math.Clamp(stats.RawCpuUsagePercentage, 0f, 100f), // raw: the oracle smooths it itself
            ["memory_usage_bytes"] = stats.RawMemoryUsageBytes,
            ["max_available_memory_bytes"] = stats.MaximumAvailableMemoryBytes,
            ["activation_count"] = workingSet.Count,
        }, ct);
        if (answer.Ok)
        {
            Grant(sentAt, answer.Number("lease_ms"));
            lock (_lock) if (_status == "joining" && _active) _status = "active";
            return true;
        }
        if (answer.Problem == "silo-declared-dead") await DeclaredDeadAsync(id);
        else if (answer.Status is 429 or 503)
            Interlocked.Exchange(ref _quietUntil, Stopwatch.GetTimestamp() + Ticks(answer.RetryAfter ?? TimeSpan.FromSeconds(1)));
        else log.LogWarning("The oracle refused a heartbeat of {Silo}: {Status} {Problem}", id, answer.Status, answer.Problem);
        return false;
    }

    private void Grant(long sentAt, long leaseMs)
    {
        var until = sentAt + Ticks(TimeSpan.FromMilliseconds(leaseMs));
        bool resumed;
        lock (_lock)
        {
            // An acknowledgement after its own lease ran out grants nothing; a later one never shortens the lease.
            if (until <= Stopwatch.GetTimestamp() || until <= _leaseUntil) return;
            _leaseUntil = until;
            resumed = _paused;
            _paused = false;
            _leaseHeld.TrySetResult();
        }
        if (resumed) log.LogInformation("Silo {Silo} holds its lease again: its grains resume", Id);
    }

    private async Task DeclaredDeadAsync(string deadId)
    {
        lock (_lock)
        {
            if (OracleIds.Silo(local.SiloAddress, _incarnation) != deadId) return; // a concurrent heartbeat handled it
            _leaseUntil = 0;
            _paused = false;
            _status = "joining";
            _incarnation++;
            _dropping = true;
        }
        log.LogWarning("The oracle declared {Silo} dead: its grains are dropped; rejoining as {Next}", deadId, Id);
        try { await DropAllGrains(); }
        finally { lock (_lock) _dropping = false; }
    }

    private async Task DrainAsync(CancellationToken ct)
    {
        lock (_lock) _status = "shutting_down";
        var path = $"/silos/{OracleHttp.Escape(Id)}";
        try
        {
            // The oracle issues a `drain` migration for each movable grain; OracleMigrationWorker carries them out.
            await oracle.SendAsync(HttpMethod.Post, path + "/drain", ct: ct);
            var deadline = Stopwatch.GetTimestamp() + Ticks(options.Value.DrainDeadline);
            while (Stopwatch.GetTimestamp() < deadline)
            {
                var silo = await oracle.SendAsync(HttpMethod.Get, path, ct: ct);
                if (!silo.Ok || silo.Body.GetProperty("drain") is not { ValueKind: JsonValueKind.Object } drain
                    || drain.GetProperty("remaining_activations").GetInt64() == 0) break;
                await Task.Delay(TimeSpan.FromMilliseconds(250), ct);
            }
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            log.LogWarning(e, "The drain of {Silo} did not finish; Orleans stops the grains left", Id);
        }
    }

    private async Task LeaveAsync(CancellationToken ct)
    {
        _stopping.Cancel();
        try
        {
            // Only now: every grain has stopped (deactivations unregistered them), so leaving releases nothing that runs.
            await oracle.SendAsync(HttpMethod.Delete, $"/silos/{OracleHttp.Escape(Id)}", ct: ct);
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            log.LogWarning(e, "{Silo} could not leave; the oracle declares it dead after the silo TTL", Id);
        }
    }

    private static long Ticks(TimeSpan span) => (long)(span.TotalSeconds * Stopwatch.Frequency);
}
