// A sketch, not built here: an Orleans placement director that asks the placement oracle where a new
// activation should go, and a hosted service that reports the silo's load to it. Written against
// Orleans 8/9 (Microsoft.Orleans.Server); names of statistics APIs vary between versions — adapt them.
//
// Use:
//   siloBuilder.Services.AddHttpClient("placement-oracle", c => c.BaseAddress = new Uri("http://oracle:8080/"));
//   siloBuilder.Services.Configure<OracleOptions>(o => { o.Cluster = "prod"; o.Key = "<a cluster key, scopes silo>"; });
//   siloBuilder.Services.AddPlacementDirector<OraclePlacement, OraclePlacementDirector>();
//   siloBuilder.Services.AddHostedService<OracleHeartbeats>();
//   [OraclePlacement] public sealed class UserGrain : Grain, IUserGrain { … }
//
// See examples/orleans/README.md for what this gives and what it does not.

using System.Net.Http.Json;
using System.Text.Json.Serialization;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans.Placement;
using Orleans.Runtime;
using Orleans.Runtime.Placement;
using Orleans.Statistics;

namespace PlacementOracle.Orleans;

/// <summary>Where the oracle is and which cluster this silo belongs to.</summary>
public sealed class OracleOptions
{
    public string Cluster { get; set; } = "demo";
    /// <summary>A cluster key with the <c>silo</c> scope; empty when the oracle runs in open mode.</summary>
    public string Key { get; set; } = "";
    /// <summary>How long a placement may wait for the oracle before Orleans decides alone.</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromMilliseconds(250);
    public TimeSpan HeartbeatPeriod { get; set; } = TimeSpan.FromSeconds(1);
}

/// <summary>The strategy grain classes opt into; the oracle's policy picks the algorithm per grain type.</summary>
[Serializable, GenerateSerializer, Immutable, SuppressReferenceTracking]
public sealed class OraclePlacement : PlacementStrategy
{
    internal static readonly OraclePlacement Singleton = new();
}

[AttributeUsage(AttributeTargets.Class, AllowMultiple = false)]
public sealed class OraclePlacementAttribute() : PlacementAttribute(OraclePlacement.Singleton);

/// <summary>The oracle's name for a silo incarnation: <c>address:port@generation</c>, as its heartbeats say.</summary>
internal static class OracleSiloId
{
    public static string Of(SiloAddress silo) => $"{silo.Endpoint.Address}:{silo.Endpoint.Port}@{silo.Generation}";
}

/// <summary>
/// Asks <c>POST /v1/clusters/{cluster}/placements</c>. The oracle answers the grain's registered activation or
/// registers a new one; Orleans then sends the message to the silo it names. When the oracle is slow, down,
/// or names a silo this silo does not see as compatible, the director falls back to a random compatible silo,
/// so placement never stops because the oracle did.
/// </summary>
public sealed class OraclePlacementDirector(
    IHttpClientFactory http, IOptions<OracleOptions> options, ILogger<OraclePlacementDirector> log) : IPlacementDirector
{
    private readonly OracleOptions _options = options.Value;

    public async Task<SiloAddress> OnAddActivation(PlacementStrategy strategy, PlacementTarget target, IPlacementContext context)
    {
        var compatible = context.GetCompatibleSilos(target);
        var byOracleId = compatible.ToDictionary(OracleSiloId.Of);

        // Orleans' placement hint (set by migration and by callers) travels as the oracle's `hint`.
        string? hint = null;
        if (target.RequestContextData is { } data
            && data.TryGetValue(IPlacementDirector.PlacementHintKey, out var value)
            && value is SiloAddress hinted && compatible.Contains(hinted))
        {
            hint = OracleSiloId.Of(hinted);
        }

        var request = new PlacementRequest(
            Grain: OracleGrainId(target.GrainIdentity),
            RequestingSilo: OracleSiloId.Of(context.LocalSilo),
            Hint: hint);
        try
        {
            using var cancel = new CancellationTokenSource(_options.Timeout);
            var client = http.CreateClient("placement-oracle");
            using var message = new HttpRequestMessage(HttpMethod.Post, $"v1/clusters/{_options.Cluster}/placements")
            {
                Content = JsonContent.Create(request),
            };
            if (_options.Key.Length > 0) message.Headers.Authorization = new("Bearer", _options.Key);
            using var response = await client.SendAsync(message, cancel.Token);
            if (response.IsSuccessStatusCode)
            {
                var answer = await response.Content.ReadFromJsonAsync<PlacementResponse>(cancel.Token);
                if (answer is not null && byOracleId.TryGetValue(answer.Silo, out var chosen)) return chosen;
                log.LogWarning("The oracle placed {Grain} on {Silo}, which this silo does not see as compatible",
                    request.Grain, answer?.Silo);
            }
            else
            {
                // problem+json: `detail` says why (409: no silo hosts the type; 429/503: retry later).
                log.LogWarning("The oracle refused to place {Grain}: {Status} {Problem}", request.Grain,
                    (int)response.StatusCode, await response.Content.ReadAsStringAsync(cancel.Token));
            }
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            log.LogWarning(e, "The oracle did not answer for {Grain}; placing it locally", request.Grain);
        }
        return compatible[Random.Shared.Next(compatible.Length)];
    }

    /// <summary>The oracle reads <c>type/key</c>: the type picks the policy's strategy for the grain.</summary>
    private static string OracleGrainId(GrainId grain) => $"{grain.Type}/{grain.Key}";

    private sealed record PlacementRequest(
        [property: JsonPropertyName("grain")] string Grain,
        [property: JsonPropertyName("requesting_silo")] string RequestingSilo,
        [property: JsonPropertyName("hint")] string? Hint);

    private sealed record PlacementResponse(
        [property: JsonPropertyName("silo")] string Silo,
        [property: JsonPropertyName("outcome")] string Outcome,
        [property: JsonPropertyName("epoch")] long? Epoch);
}

/// <summary>
/// Reports this silo's load to <c>POST /v1/clusters/{cluster}/heartbeats</c> once a second: the oracle declares a
/// silo dead after the cluster's <c>silo_ttl</c> (10 s by default) of silence and places nothing on it.
/// </summary>
public sealed class OracleHeartbeats(
    IHttpClientFactory http, IOptions<OracleOptions> options, ILocalSiloDetails silo,
    IEnvironmentStatisticsProvider statistics, IActivationWorkingSet workingSet, ILogger<OracleHeartbeats> log)
    : BackgroundService
{
    protected override async Task ExecuteAsync(CancellationToken stopping)
    {
        var client = http.CreateClient("placement-oracle");
        var id = OracleSiloId.Of(silo.SiloAddress);
        using var timer = new PeriodicTimer(options.Value.HeartbeatPeriod);
        while (!stopping.IsCancellationRequested)
        {
            var stats = statistics.GetEnvironmentStatistics();
            var beat = new
            {
                silo = id,
                status = "active",
                cpu_usage = Math.Clamp(stats.RawCpuUsagePercentage, 0f, 100f),
                memory_usage_bytes = stats.RawMemoryUsageBytes,
                max_available_memory_bytes = stats.MaximumAvailableMemoryBytes,
                activation_count = workingSet.Count,
                recent_activation_count = workingSet.Count,
            };
            try
            {
                using var message = new HttpRequestMessage(HttpMethod.Post, $"v1/clusters/{options.Value.Cluster}/heartbeats")
                {
                    Content = JsonContent.Create(beat),
                };
                if (options.Value.Key.Length > 0) message.Headers.Authorization = new("Bearer", options.Value.Key);
                using var response = await client.SendAsync(message, stopping);
                // 409 means this incarnation was declared dead: Orleans' own membership will have done the same.
                if (!response.IsSuccessStatusCode)
                    log.LogWarning("The oracle refused a heartbeat: {Status}", (int)response.StatusCode);
            }
            catch (Exception e) when (e is HttpRequestException && !stopping.IsCancellationRequested)
            {
                log.LogWarning(e, "The oracle did not take a heartbeat");
            }
            try
            {
                await timer.WaitForNextTickAsync(stopping);
            }
            catch (OperationCanceledException)
            {
                break;
            }
        }
    }
}
