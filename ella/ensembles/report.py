"""The printed summary of a finished ensemble run (``ella ensemble``, ``ella report``)."""

from __future__ import annotations

__all__ = ["format_results"]


def format_results(results: dict) -> str:
    """A short table of a finished ensemble run's ``results.json``."""
    t = results["test"]
    epochs, members = results["epochs"], results["members"]
    lines = [
        f"{results['method']} ensemble of {members} member{'' if members == 1 else 's'} "
        f"({results['parameters_per_member']:,} parameters each), trained on "
        f"{results['train_size']} images for {epochs} epoch{'' if epochs == 1 else 's'} "
        f"in {results['train_time_s']:.0f} s",
        f"test ({results['test_size']} images): accuracy {100 * t['accuracy']:.2f}%  "
        f"NLL {t['nll']:.4f}  ECE {t['ece']:.4f}  (members alone: accuracy "
        f"{100 * t['member_accuracy']:.2f}%, NLL {t['member_nll']:.4f})",
    ]
    if "corrupted" in results:
        c = results["corrupted"]
        sev = results["config"]["corruption_severities"]
        lines.append(
            f"corrupted (8 corruptions x severities {sev}): accuracy {100 * c['accuracy']:.2f}%  "
            f"NLL {c['nll']:.4f}  ECE {c['ece']:.4f}"
        )
        for name, by_severity in c["by_corruption"].items():
            cells = "  ".join(f"s{s}: {100 * m['accuracy']:5.1f}%" for s, m in by_severity.items())
            lines.append(f"  {name:<15} {cells}")
    if "orbit" in results:
        o = results["orbit"]
        lines.append(
            f"orbit over {results['config']['osp_group']} (|G| = {o['group_order']}): "
            f"OSP {o['osp']:.2f} +- {o['osp_std']:.2f} (members alone {o['member_osp']:.2f}), "
            f"orbit symmetric KL {o['orbit_kl']:.4f} (members alone {o['member_orbit_kl']:.4f})"
        )
    return "\n".join(lines)
