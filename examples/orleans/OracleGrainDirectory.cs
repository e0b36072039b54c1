// Not built here (this repository has no .NET toolchain): written against Orleans 8/9 (Microsoft.Orleans.Server).
//
// This file: where a grain's activation lives, decided and registered by the oracle.
// - OracleGrainDirectory (IGrainDirectory): Register asks the oracle as the requesting silo and keeps the epoch of
//   each activation it wins; Unregister ends exactly that activation (DELETE …/activations/{grain}?silo=…&epoch=…);
//   a registration handed over by Orleans' live migration moves by completing the oracle's migration.
// - OraclePlacementDirector (IPlacementDirector): where a new activation goes, by the oracle's policy.
// - OracleLeaseGuard (IIncomingGrainCallFilter): calls wait while the silo's lease has run out; activations whose
//   registration a death released are deactivated.

using System.Collections.Concurrent;
using System.Text.Json;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using Orleans;
using Orleans.GrainDirectory;
using Orleans.Placement;
using Orleans.Runtime;
using Orleans.Runtime.Placement;

namespace PlacementOracle.Orleans;

/// <summary>Grain classes opt in with <c>[OraclePlacement, GrainDirectory(GrainDirectoryName = "oracle")]</c>.</summary>
[Serializable, GenerateSerializer, Immutable, SuppressReferenceTracking]
public sealed class OraclePlacement : PlacementStrategy
{
    internal static readonly OraclePlacement Singleton = new();
}

[AttributeUsage(AttributeTargets.Class, AllowMultiple = false)]
public sealed class OraclePlacementAttribute() : PlacementAttribute(OraclePlacement.Singleton);

public sealed class OracleGrainDirectory : IGrainDirectory
{
    /// <summary>A registration this silo holds: Orleans' address of the activation, the oracle's epoch and silo id,
    /// and the activation itself once a call has reached it (to deactivate or migrate it).</summary>
    internal sealed class Held(GrainAddress address, long epoch, string silo)
    {
        public GrainAddress Address { get; } = address;
        public long Epoch { get; } = epoch;
        public string Silo { get; } = silo;
        public IGrainContext? Context { get; set; }
    }

    internal enum Admission { NotRegisteredHere, Held, Dropped }

    private readonly ConcurrentDictionary<string, Held> _held = new(); // by oracle grain id
    private readonly ConcurrentDictionary<ActivationId, bool> _dropped = new();
    private readonly OracleHttp _oracle;
    private readonly OracleSilo _silo;
    private readonly ILogger<OracleGrainDirectory> _log;

    public OracleGrainDirectory(OracleHttp oracle, OracleSilo silo, ILogger<OracleGrainDirectory> log)
    {
        (_oracle, _silo, _log) = (oracle, silo, log);
        silo.DropAllGrains = DropAllAsync;
    }

    public Task<GrainAddress?> Register(GrainAddress address) => Register(address, null);

    public async Task<GrainAddress?> Register(GrainAddress address, GrainAddress? previousAddress)
    {
        // Paused (the lease ran out): nothing new activates here; the activation fails and the caller retries.
        if (!_silo.MayRunGrains) throw new SiloUnavailableException($"{_silo.Id} does not hold its lease");
        var me = _silo.Id;
        var grain = OracleIds.Grain(address.GrainId);
        // As the requesting silo: the store's answer (never a replica's cached one), so "me" means this silo holds it.
        var answer = await _oracle.SendAsync(HttpMethod.Post, "/placements", new { grain, requesting_silo = me });
        if (!answer.Ok) throw new OracleException(answer);
        if (answer.Text("outcome") == "stateless") return address; // never registered: any silo may run one
        var (owner, epoch) = (answer.Text("silo"), answer.Number("epoch"));
        if (owner != me && previousAddress?.SiloAddress is { } from && OracleIds.ToSiloAddress(owner).Equals(from)
            && await CompleteHandOffAsync(grain, owner, epoch, me) is long moved)
        {
            (owner, epoch) = (me, moved);
        }
        if (owner != me)
        {
            // Registered elsewhere: Orleans discards this activation and forwards to the one the oracle names.
            return new GrainAddress { GrainId = address.GrainId, SiloAddress = OracleIds.ToSiloAddress(owner) };
        }
        _held[grain] = new Held(address, epoch, me);
        return address;
    }

    /// <summary>
    /// Orleans' live migration is handing the grain over from <paramref name="source"/>, which still holds the
    /// registration (activation <paramref name="epoch"/>): it moves here when the oracle's migration of it completes.
    /// OracleMigrationWorker started that migration on the source and awaits this activation, so the migration is
    /// among the first open ones of the source. Without one (a migration the oracle did not issue) nothing moves.
    /// </summary>
    private async Task<long?> CompleteHandOffAsync(string grain, string source, long epoch, string me)
    {
        var page = await _oracle.SendAsync(HttpMethod.Get, $"/migrations?silo={OracleHttp.Escape(source)}&limit=1000");
        if (!page.Ok) return null;
        foreach (var migration in page.Body.GetProperty("migrations").EnumerateArray())
        {
            if (migration.GetProperty("grain").GetString() != grain || migration.GetProperty("to").GetString() != me
                || migration.GetProperty("epoch").GetInt64() != epoch) continue;
            var done = await _oracle.SendAsync(HttpMethod.Post, $"/migrations/{migration.GetProperty("id").GetInt64()}/complete");
            return done.Ok ? done.Number("epoch") : null; // refused: it no longer applied
        }
        return null;
    }

    public async Task<GrainAddress?> Lookup(GrainId grainId)
    {
        var grain = OracleIds.Grain(grainId);
        if (_held.TryGetValue(grain, out var held)) return held.Address;
        var found = await _oracle.SendAsync(HttpMethod.Get, $"/activations/{OracleHttp.Escape(grain)}"); // the store's answer
        if (found.Status == 404) return null;
        if (!found.Ok) throw new OracleException(found);
        // Another silo's activation: its ActivationId is unknown here, which Orleans' address matching allows.
        return new GrainAddress { GrainId = grainId, SiloAddress = OracleIds.ToSiloAddress(found.Text("silo")) };
    }

    public async Task Unregister(GrainAddress address)
    {
        var grain = OracleIds.Grain(address.GrainId);
        // Only this silo's own activation, and only the registration it won: another silo's is not this one's to end
        // (the oracle releases a dead silo's registrations itself).
        if (!_held.TryGetValue(grain, out var held) || !held.Address.Matches(address)) return;
        _held.TryRemove(KeyValuePair.Create(grain, held));
        // Removed only if it is still activation `epoch` on this silo: a late unregister never ends a newer activation.
        var answer = await _oracle.SendAsync(HttpMethod.Delete,
            $"/activations/{OracleHttp.Escape(grain)}?silo={OracleHttp.Escape(held.Silo)}&epoch={held.Epoch}");
        if (!answer.Ok && answer.Status is not (404 or 409)) _log.LogWarning("Deactivating {Grain}: {Status}", grain, answer.Status);
    }

    /// <summary>Orleans' membership verdicts are not the oracle's: a registration is released when the oracle declares
    /// its silo dead, not before (until then the grain waits, so that it never runs twice).</summary>
    public Task UnregisterSilos(List<SiloAddress> siloAddresses) => Task.CompletedTask;

    /// <summary>What the lease guard does with a call to this activation.</summary>
    internal Admission Admit(IGrainContext activation)
    {
        if (_dropped.TryRemove(activation.ActivationId, out _)) return Admission.Dropped;
        if (!_held.TryGetValue(OracleIds.Grain(activation.GrainId), out var held)
            || held.Address.ActivationId != activation.ActivationId) return Admission.NotRegisteredHere;
        held.Context ??= activation;
        return Admission.Held;
    }

    /// <summary>The activation of <paramref name="grain"/> under registration <paramref name="epoch"/>, if it runs here
    /// and has served a call.</summary>
    internal IGrainContext? Activation(string grain, long epoch) =>
        _held.TryGetValue(grain, out var held) && held.Epoch == epoch ? held.Context : null;

    /// <summary>The activation left for a migration's target (Orleans does not unregister a migrated activation: the
    /// target's registration replaced it).</summary>
    internal void Forget(string grain, long epoch)
    {
        if (_held.TryGetValue(grain, out var held) && held.Epoch == epoch) _held.TryRemove(KeyValuePair.Create(grain, held));
    }

    /// <summary>Told dead: the oracle released every registration, so every activation stops — at once where it is
    /// known, at its next call otherwise — before the silo rejoins.</summary>
    private async Task DropAllAsync()
    {
        var dropped = _held.Values.ToList();
        _held.Clear();
        var reason = new DeactivationReason(DeactivationReasonCode.ApplicationRequested, "the oracle declared this silo dead");
        foreach (var held in dropped)
        {
            if (held.Context is { } activation) activation.Deactivate(reason, CancellationToken.None);
            else _dropped[held.Address.ActivationId] = true;
        }
        var stopped = dropped.Where(h => h.Context is not null).Select(h => h.Context!.Deactivated);
        try { await Task.WhenAll(stopped).WaitAsync(TimeSpan.FromSeconds(30)); }
        catch (TimeoutException) { _log.LogWarning("Some activations took more than 30 s to stop after the silo's death"); }
    }
}

public sealed class OraclePlacementDirector(OracleHttp oracle, OracleSilo silo, ILogger<OraclePlacementDirector> log)
    : IPlacementDirector
{
    /// <summary>Set in the request context of a migration the oracle issued (with the placement hint: its target).</summary>
    public const string MigrationKey = "placement-oracle-migration";

    public async Task<SiloAddress> OnAddActivation(PlacementStrategy strategy, PlacementTarget target, IPlacementContext context)
    {
        var compatible = context.GetCompatibleSilos(target);
        var data = target.RequestContextData;
        var hint = data?.GetValueOrDefault(IPlacementDirector.PlacementHintKey) as SiloAddress;
        hint = hint is not null && compatible.Contains(hint) ? hint : null;
        // A migration the oracle issued: the target it chose. (Any other migration asks the oracle, which names the
        // grain's current silo, so Orleans leaves the grain where it is.)
        if (data?.ContainsKey(MigrationKey) == true && hint is not null) return hint;
        try
        {
            var answer = await oracle.SendAsync(HttpMethod.Post, "/placements", new
            {
                grain = OracleIds.Grain(target.GrainIdentity),
                requesting_silo = silo.Id,
                hint = hint is null ? null : OracleIds.Silo(hint, 0), // its first incarnation: a later one is not known here
            });
            if (answer.Ok && answer.Text("outcome") != "stateless"
                && OracleIds.ToSiloAddress(answer.Text("silo")) is var chosen && compatible.Contains(chosen)) return chosen;
            log.LogWarning("The oracle did not place {Grain}: {Status} {Problem}", target.GrainIdentity, answer.Status, answer.Problem);
        }
        catch (Exception e) when (e is HttpRequestException or TaskCanceledException)
        {
            log.LogWarning(e, "The oracle did not answer for {Grain}", target.GrainIdentity);
        }
        // The silo chosen here still registers through the oracle, and forwards if the registration is elsewhere.
        return compatible.Contains(context.LocalSilo) ? context.LocalSilo : compatible[Random.Shared.Next(compatible.Length)];
    }
}

/// <summary>Every call to an activation this silo registered through the oracle passes here: it waits while the
/// lease has run out (the grain is paused) and fails if the lease does not come back in time.</summary>
public sealed class OracleLeaseGuard(OracleSilo silo, OracleGrainDirectory directory, IOptions<OracleOptions> options)
    : IIncomingGrainCallFilter
{
    public async Task Invoke(IIncomingGrainCallContext call)
    {
        var admission = directory.Admit(call.TargetContext);
        if (admission == OracleGrainDirectory.Admission.Dropped)
        {
            call.TargetContext.Deactivate(
                new DeactivationReason(DeactivationReasonCode.ApplicationRequested, "its registration was released"),
                CancellationToken.None);
            throw new SiloUnavailableException($"{call.TargetId} no longer runs here; call it again");
        }
        if (admission == OracleGrainDirectory.Admission.Held && !await silo.WaitForLeaseAsync(options.Value.PausedCallWait))
            throw new SiloUnavailableException($"{silo.Id} does not hold its lease: {call.TargetId} is paused");
        await call.Invoke();
    }
}
