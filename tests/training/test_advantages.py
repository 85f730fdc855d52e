"""Every worked example of docs/methods.md §9.2-§9.5, §10 and §11, to 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

from trajsynth.training.advantages import (
    StepTrajectory,
    TreeLeaf,
    arpo_hard,
    fork,
    fork_step_rewards,
    gigpo,
    grpo,
    hgpo,
    hgpo_trajectories,
    history_keys,
    leaves_from_paths,
    tree_gl,
    tree_subgroup,
    whiten,
)
from trajsynth.training.early_stop import EarlyStopRule, ReferenceCurves, token_regret

TOL = 1e-4

# The tree of §9.3: leaves 1-0/2-0 (R=1), 1-0/2-1 (0), 1-1/2-0 (0), 1-1/2-1 (0).
TREE = [
    TreeLeaf(("1-0", "2-0"), 1.0),
    TreeLeaf(("1-0", "2-1"), 0.0),
    TreeLeaf(("1-1", "2-0"), 0.0),
    TreeLeaf(("1-1", "2-1"), 0.0),
]


def test_treepo_average_matches_methods_example():
    got = tree_subgroup(TREE, variant="average")
    np.testing.assert_allclose(got, [0.625, -0.375, -0.125, -0.125], atol=TOL)


def test_treepo_group_size_matches_methods_example():
    got = tree_subgroup(TREE, variant="group_size")
    np.testing.assert_allclose(got, [0.66667, -0.33333, -0.16667, -0.16667], atol=TOL)


def test_treepo_on_a_flat_group_is_centered_grpo_and_whitening_standardizes():
    flat = [TreeLeaf((f"n{i}",), r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    np.testing.assert_allclose(tree_subgroup(flat), [0.5, -0.5, -0.5, 0.5], atol=TOL)
    tokens = np.array([[0.625, 0.625, 0.0], [-0.375, 0.0, 0.0]])
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    out = whiten(tokens, mask)
    assert out[mask == 0].tolist() == [0.0, 0.0, 0.0]
    assert abs(out[mask == 1].mean()) < TOL and abs(out[mask == 1].std() - 1.0) < TOL
    with pytest.raises(ValueError, match="variant"):
        tree_subgroup(TREE, variant="median")  # type: ignore[arg-type]


def test_tree_gl_matches_methods_example():
    got = tree_gl(TREE)
    s = 0.35355
    np.testing.assert_allclose(got[0], [s, 1.25], atol=TOL)
    np.testing.assert_allclose(got[1], [s, -0.75], atol=TOL)
    np.testing.assert_allclose(got[2], [-s, -0.25], atol=TOL)
    np.testing.assert_allclose(got[3], [-s, -0.25], atol=TOL)


def test_tree_gl_leave_one_out_centres_leaf_rewards_first():
    got = tree_gl(TREE, leave_one_out=True)
    # r_i - mean of the others: (1, -1/3, -1/3, -1/3); V(root) = 0, V(1-0) = 1/3.
    np.testing.assert_allclose(got[0], [(1 / 3 + 1 / 3) / np.sqrt(2), 1 + (1 - 1 / 3)], atol=TOL)


def test_fork_matches_methods_example_and_adds_the_trajectory_term():
    leaves = [
        TreeLeaf(("s1", "a"), 1.0),
        TreeLeaf(("s2", "b"), 0.0),
        TreeLeaf(("s2", "c"), 0.0),
    ]
    rewards = fork_step_rewards(leaves)
    assert rewards[("s1",)] == pytest.approx(1.1)
    assert rewards[("s2",)] == pytest.approx(0.1)
    got = fork(leaves)
    a_traj = grpo([1.0, 0.0, 0.0])
    # s1: +0.5, no sibling below s1 (0); s2: -0.5; its children b, c tie (R 0.1 each) -> 0.
    np.testing.assert_allclose(got[0], [a_traj[0] + 0.5, a_traj[0]], atol=TOL)
    np.testing.assert_allclose(got[1], [a_traj[1] - 0.5, a_traj[1]], atol=TOL)
    failed_call = [TreeLeaf(("s2", "b"), 0.0, exec_ok=(True, False)), leaves[2]]
    got = fork(failed_call)
    np.testing.assert_allclose([got[0][1], got[1][1]], [-0.05, 0.05], atol=TOL)


def test_arpo_branch_example_and_hard_attribution():
    h_init, h_t = 1.2, 2.0
    dh = float(np.clip((h_t - h_init) / h_init, -1, 1))
    p = 0.5 + 0.2 * dh
    assert dh == pytest.approx(0.6667, abs=TOL) and p == pytest.approx(0.63333, abs=TOL)
    assert p > 0.41  # u = 0.41 branches
    assert p * 0.5**1 == pytest.approx(0.31667, abs=TOL)
    got = arpo_hard(TREE, [0.75, -0.25, -0.25, -0.25])
    np.testing.assert_allclose(got[0], [0.25, 0.75], atol=TOL)
    np.testing.assert_allclose(got[2], [-0.25, -0.25], atol=TOL)


def _gigpo_group() -> list[StepTrajectory]:
    # Episodes of 4 steps, reward only at the end; anchor "s" at t=2 (traj 1, 2) and t=3 (3).
    return [
        StepTrajectory(1.0, ("a1", "s", "c1", "d1")),
        StepTrajectory(0.0, ("a2", "s", "c2", "d2")),
        StepTrajectory(1.0, ("a3", "b3", "s", "d3")),
        StepTrajectory(0.0, ("a4", "b4", "c4", "d4")),
    ]


def test_gigpo_matches_methods_example():
    result = gigpo(_gigpo_group())
    np.testing.assert_allclose(result.episode, [0.5, -0.5, 0.5, -0.5], atol=TOL)
    np.testing.assert_allclose(
        [result.returns[0][1], result.returns[1][1], result.returns[2][2]],
        [0.9025, 0.0, 0.95],
        atol=TOL,
    )
    a_s = [result.step[0][1], result.step[1][1], result.step[2][2]]
    np.testing.assert_allclose(a_s, [0.285, -0.6175, 0.3325], atol=TOL)
    a = [result.advantages[0][1], result.advantages[1][1], result.advantages[2][2]]
    np.testing.assert_allclose(a, [0.785, -1.1175, 0.8325], atol=TOL)
    # every other step is a singleton group: A = A_E there
    np.testing.assert_allclose(result.advantages[3], [-0.5] * 4, atol=TOL)
    assert result.size_histogram == {1: 13, 3: 1}
    assert result.group_sizes[2].tolist() == [1, 1, 3, 1]


def test_gigpo_mean_std_norm_episode_term():
    result = gigpo(_gigpo_group(), norm="mean_std_norm")
    np.testing.assert_allclose(result.episode, [0.86603, -0.86603, 0.86603, -0.86603], atol=TOL)
    g = np.array([0.9025, 0.0, 0.95])
    expected = (g - g.mean()) / (g.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(
        [result.step[0][1], result.step[1][1], result.step[2][2]], expected, atol=TOL
    )


def test_hgpo_matches_methods_example():
    contexts = [("s", "a", "c"), ("s", "a", "d"), ("s", "b", "c"), ("s", "b", "c")]
    result = hgpo([1.0, 0.0, 0.5, 1.0], contexts)
    np.testing.assert_allclose(result.advantages, [0.45833, -0.54167, -0.22917, 0.27083], atol=TOL)
    np.testing.assert_allclose(result.level_advantages[:, 0], [0.375, -0.625, -0.125, 0.375])
    np.testing.assert_allclose(result.level_advantages[:, 1], [0.5, -0.5, -0.25, 0.25])
    assert np.isnan(result.level_advantages[:2, 2]).all()
    np.testing.assert_allclose(result.level_advantages[2:, 2], [-0.25, 0.25])
    assert result.level_sizes.tolist() == [[4, 2, 1], [4, 2, 1], [4, 2, 2], [4, 2, 2]]


def test_hgpo_over_trajectories_uses_anchor_histories():
    assert history_keys(("x", "y", "z"), 1, 2) == ("y", "x", None)
    trajs = [StepTrajectory(1.0, ("x", "s")), StepTrajectory(0.0, ("x", "s"))]
    got = hgpo_trajectories(trajs, gamma=1.0)
    # step 0: same state, returns 1 and 0 at all levels; step 1 too.
    np.testing.assert_allclose(got[0], [0.5, 0.5])
    np.testing.assert_allclose(got[1], [-0.5, -0.5])


def test_leaves_from_paths_round_trip():
    leaves = leaves_from_paths([["n1", "n2"], ["n1", "n3"]], [1, 0], exec_ok={1: [True, False]})
    assert leaves[0] == TreeLeaf(("n1", "n2"), 1.0)
    assert leaves[1].exec_ok == (True, False)
    with pytest.raises(ValueError, match="non-empty"):
        TreeLeaf((), 1.0)


def test_espo_token_example():
    rho, h, mu = token_regret([2.0, 1.0, 0.0], 1)
    assert (rho, h, mu) == pytest.approx((1.0, 0.83240, 0.42479), abs=TOL)
    p = np.exp([2.0, 1.0, 0.0]) / np.exp([2.0, 1.0, 0.0]).sum()
    np.testing.assert_allclose(p, [0.66524, 0.24473, 0.09003], atol=TOL)
    var = float((p * np.log(p) ** 2).sum() - h**2)
    assert var == pytest.approx(0.42440, abs=TOL)


def test_espo_turn_example():
    decision = EarlyStopRule().decide([2.5, 7.0, 10.1], [3.0, 5.5, 8.0, 10.0])
    np.testing.assert_allclose(decision.thresholds, [3.6, 6.6, 9.6, 12.0], atol=TOL)
    assert decision.stopped and decision.stop_turn == 3
    assert not EarlyStopRule().decide([2.5, 7.0, 9.0], [3.0, 5.5, 8.0]).stopped


def test_espo_reference_needs_thirty_successes():
    curves = ReferenceCurves()
    curves.add_round("shop", [[1.0, 2.0]] * 29)
    assert curves.reference("shop") is None
    curves.add_round("shop", [[float(i), 10.0] for i in range(1, 2)])
    ref = curves.reference("shop")
    assert ref == pytest.approx([1.0, 2.0])  # one outlier of 30 stays above the 95th pct
    for _ in range(3):
        curves.add_round("shop", [])
    assert curves.reference("shop") is None  # only the last 2 rounds count
