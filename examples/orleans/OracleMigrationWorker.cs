// Not built here (this repository has no .NET toolchain): written against Orleans 8/9 (Microsoft.Orleans.Server).
//
// This file: OracleMigrationWorker, which carries out the migrations the oracle issues for this silo (rebalancer,
// repartitioner, drain) with Orleans' live migration, and AddPlacementOracle, which wires the three files into a silo.

using System.Collections.Concurrent;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans;
using Orleans.Hosting;
using Orleans.Runtime;
using Orleans.Runtime.Hosting;
using Orleans.Runtime.Placement;

namespace PlacementOracle.Orleans;

/// <summary>
/// Polls <c>GET …/migrations?silo=…</c> every second while the lease holds. For each migration: asks the activation
/// to migrate when idle with the placement hint set to the migration's target — what <c>Grain.MigrateOnIdle()</c> does
/// with the request context — so that Orleans dehydrates it here and rehydrates it there, where the target's
/// OracleGrainDirectory completes the migration as it registers. Once the activation has left, the worker completes
/// it too (a retry gets the first answer); if it does not leave within <c>MigrationDeadline</c>, or does not run here,
/// the migration is failed and the grain stays.
/// </summary>
public sealed class OracleMigrationWorker(
    OracleHttp oracle, OracleSilo silo, OracleGrainDirectory directory, IOptions<OracleOptions> options,
    ILogger<OracleMigrationWorker> log) : ILifecycleParticipant<ISiloLifecycle>
{
    private const int MaxUnderWay = 100;
    private readonly ConcurrentDictionary<long, bool> _underWay = new();
    private readonly CancellationTokenSource _stopping = new();

    public void Participate(ISiloLifecycle lifecycle) =>
        // Stops after Active's stop, so that it carries out the drain the silo asks for then.
        lifecycle.Subscribe(nameof(OracleMigrationWorker), ServiceLifecycleStage.ApplicationServices,
            _ => { _ = RunAsync(_stopping.Token); return Task.CompletedTask; },
            _ => { _stopping.Cancel(); return Task.CompletedTask; });

    private async Task RunAsync(CancellationToken stopping)
    {
        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(1));
        try
        {
            while (await timer.WaitForNextTickAsync(stopping))
            {
                if (!silo.MayRunGrains) continue; // a paused silo hands nothing over
                try
                {
                    var page = await oracle.SendAsync(HttpMethod.Get,
                        $"/migrations?silo={OracleHttp.Escape(silo.Id)}&limit={MaxUnderWay}", ct: stopping);
                    if (!page.Ok) continue;
                    foreach (var migration in page.Body.GetProperty("migrations").EnumerateArray())
                    {
                        if (_underWay.Count >= MaxUnderWay) break;
                        if (_underWay.TryAdd(migration.GetProperty("id").GetInt64(), true))
                            _ = HandOverAsync(migration.Clone(), stopping);
                    }
                }
                catch (HttpRequestException e)
                {
                    log.LogDebug(e, "Migrations of {Silo}: no answer", silo.Id);
                }
            }
        }
        catch (OperationCanceledException) { }
    }

    private async Task HandOverAsync(JsonElement migration, CancellationToken stopping)
    {
        var id = migration.GetProperty("id").GetInt64();
        try
        {
            var left = false;
            var (grain, epoch) = (migration.GetProperty("grain").GetString()!, migration.GetProperty("epoch").GetInt64());
            var activation = directory.Activation(grain, epoch);
            if (activation is not null)
            {
                var target = OracleIds.ToSiloAddress(migration.GetProperty("to").GetString()!);
                activation.Migrate(new Dictionary<string, object>
                {
                    [IPlacementDirector.PlacementHintKey] = target,
                    [OraclePlacementDirector.MigrationKey] = id,
                }, CancellationToken.None);
                try
                {
                    await activation.Deactivated.WaitAsync(options.Value.MigrationDeadline, stopping);
                    directory.Forget(grain, epoch);
                    left = true;
                }
                catch (TimeoutException) { } // never idle long enough: the grain stays
            }
            var verb = left ? "complete" : "fail";
            var answer = await oracle.SendAsync(HttpMethod.Post, $"/migrations/{id}/{verb}", ct: stopping);
            // 409 migration-ended / migration-refused, 404: it ended otherwise (e.g. the grain was deactivated).
            if (!answer.Ok && answer.Status is not (404 or 409)) log.LogWarning("Migration {Id} {Verb}: {Status}", id, verb, answer.Status);
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            log.LogDebug(e, "Migration {Id}: offered again at a later poll", id);
        }
        finally
        {
            _underWay.TryRemove(id, out _);
        }
    }
}

public static class PlacementOracleSiloBuilderExtensions
{
    /// <summary>
    /// <c>siloBuilder.AddPlacementOracle(new Uri("http://oracle:8080/"), o => { o.Cluster = "prod"; o.Key = key; })</c>,
    /// then <c>[OraclePlacement, GrainDirectory(GrainDirectoryName = "oracle")]</c> on each grain class the oracle places.
    /// </summary>
    public static ISiloBuilder AddPlacementOracle(this ISiloBuilder builder, Uri oracle, Action<OracleOptions> configure)
    {
        var services = builder.Services;
        services.Configure(configure);
        services.AddHttpClient("placement-oracle", c => { c.BaseAddress = oracle; c.Timeout = TimeSpan.FromSeconds(2); });
        services.AddSingleton<OracleHttp>();
        services.AddSingleton<OracleSilo>();
        services.AddSingleton<ILifecycleParticipant<ISiloLifecycle>>(sp => sp.GetRequiredService<OracleSilo>());
        services.AddSingleton<OracleGrainDirectory>();
        builder.AddGrainDirectory("oracle", (sp, _) => sp.GetRequiredService<OracleGrainDirectory>());
        services.AddPlacementDirector<OraclePlacement, OraclePlacementDirector>();
        builder.AddIncomingGrainCallFilter<OracleLeaseGuard>();
        services.AddSingleton<OracleMigrationWorker>();
        services.AddSingleton<ILifecycleParticipant<ISiloLifecycle>>(sp => sp.GetRequiredService<OracleMigrationWorker>());
        return builder;
    }
}
