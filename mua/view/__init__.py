"""`mua view`: one self-contained HTML page over the transcripts a run sampled.

`sources` finds training runs and evaluations under the given folders and reads their records;
`page` turns them into the page. Nothing here trains, evaluates or needs torch.
"""
