"""Generated from the task specs by `python -m pkb_env.catalog --write`: do not edit. pkb_env/suite_index.py
reads it; tests/tasks/test_suite_index.py holds it equal to the specs."""

WORLD_SIZES_INDEXED = 64
# task: dtypes, and per preset (its default dtype, the world sizes it takes among 1..WORLD_SIZES_INDEXED)
TASKS = {
    'all_gather': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'all_reduce': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'all_to_all': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'allgather_gemm': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'allgather_gemm_transposed_a': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'blocked_fp8_dequantize': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'blocked_fp8_quantize': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'broadcast': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'clip_grad_norm_ep': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,'
                '38,40,42,44,46,48,50,52,54,56,58,60,62,64'),
            'large': ('bfloat16', '1-2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,'
                '38,40,42,44,46,48,50,52,54,56,58,60,62,64'),
            'tiny': ('float32', '1-2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,'
                '38,40,42,44,46,48,50,52,54,56,58,60,62,64'),
        },
    },
    'clip_grad_norm_no_ep': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'conv2d_halo_exchange': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'ddp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8,16,32'),
        },
    },
    'deepmd_kalman_filter_optimizer': {
        'dtypes': ('float64',),
        'presets': {
            'bench': ('float64', '1-64'),
            'tiny': ('float64', '1-64'),
        },
    },
    'dinov2_distributed_knn': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,16,24,48'),
        },
    },
    'dinov2_sinkhorn_knopp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'distributed_sample_sort': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'fp8_allgather_params': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'fp8_reduce_scatter_grads': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'fsdp_and_tp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '2,4,8,16,32,64'),
            'tiny': ('float32', '2,4,8,16'),
        },
    },
    'fsdp_step_e2e': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'fused_adam_grad_unshard_allgather': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'fused_moe_fwd': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,24,32,40,48,56,64'),
            'tiny': ('float32', '1-2,4,8,16,24,32,40,48,56,64'),
        },
    },
    'fused_moe_fwd_lora': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,24,32,40,48,56,64'),
            'tiny': ('float32', '1-2,4,8,16,24,32,40,48,56,64'),
        },
    },
    'gated_deltanet_cp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'large': ('bfloat16', '1-2,4,8,16'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'gather': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gemm_allgather': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,16,24,48'),
        },
    },
    'gemm_allreduce': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gemm_reducescatter': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'gemv_decode': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gnn_feature_exchange_all2all': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gnn_feature_exchange_all2all_backward': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gnn_negative_scoring': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gnn_neighbor_sampling': {
        'dtypes': ('float32', 'bfloat16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gnn_sparse_embedding_all2all': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gnn_sparse_feature_fetch_projection': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'grad_acc_loss': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'gsplat_3d_gaussian_splatting': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'hyena_conv1d_boundary_exchange': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'hyena_forward_cp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'importance_sampling_loss': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'kimi_delta_attention_cp_tp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'layernorm_backward': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'load_balancing_loss': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'magi1_cso_async_attention': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'magi1_tile_parallel_vae_decode': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'moe_all2all_primitive': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'moe_ep_balanced': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '2-64'),
            'tiny': ('float32', '2-64'),
        },
    },
    'moe_ep_narrow': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38'
                ',40,42,44,46,48,50,52,54,56,58,60,62,64'),
            'tiny': ('float32', '2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38'
                ',40,42,44,46,48,50,52,54,56,58,60,62,64'),
        },
    },
    'moe_ep_wide': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'moe_epgroupgemm_lora_backward': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'moe_post_all2all': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'moe_pre_all2all': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'moe_token_preprocess': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'openclip_contrastive_loss': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,16,24,48'),
        },
    },
    'opensora_conv3d_allreduce': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'physicsnemo_distributed_irfft': {
        'dtypes': ('float32',),
        'presets': {
            'bench': ('float32', '1-6,8-10,12,15-16,18,20,24,30,36,40,45,48,60'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'physicsnemo_distributed_rfft': {
        'dtypes': ('float32', 'float64'),
        'presets': {
            'bench': ('float32', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'quantized_grad_allreduce': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'reduce': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'reduce_scatter': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'reducescatter_rmsnorm': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'ring_attention': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'ring_attention_backward_dp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '2,4,8,16,32'),
            'large': ('bfloat16', '2,4,8,16,32,64'),
            'tiny': ('float32', '2,4,6,8,12,24'),
        },
    },
    'ring_attention_pp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '2,4,8,16,32'),
            'large': ('bfloat16', '2,4,8,16,32,64'),
            'tiny': ('float32', '2,4,6,8,12,24'),
        },
    },
    'ring_attention_tp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '2,4,8,16,32'),
            'large': ('bfloat16', '2,4,8,16,32,64'),
            'tiny': ('float32', '2,4,8,16,32'),
        },
    },
    'rope_allgather': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'sam3_allgather_iou_suppression': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'scatter': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'sequence_parallel_mlp': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'sharded_embedding_lookup': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'torchharmonics_spherical_convolution': {
        'dtypes': ('float32',),
        'presets': {
            'bench': ('float32', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8,16'),
        },
    },
    'torchrec_kjt_all2all': {
        'dtypes': ('float32', 'bfloat16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'tp_muon_orthogonalization': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,16,24,48'),
        },
    },
    'tp_rms_norm': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,16,24,48'),
        },
    },
    'ulysses_all_gather': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'ulysses_all_gather_variable': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-64'),
            'large': ('bfloat16', '1-64'),
            'tiny': ('float32', '1-64'),
        },
    },
    'ulysses_all_to_all': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'ulysses_attention': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8,16'),
        },
    },
    'ulysses_gather_heads_scatter_seq': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'ulysses_gather_seq_scatter_heads': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'large': ('bfloat16', '1-2,4,8,16,32'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'ulysses_gather_seq_scatter_heads_qkv': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8'),
            'large': ('bfloat16', '1-2,4,8,16,32'),
            'tiny': ('float32', '1-4,6,8,12,24'),
        },
    },
    'vocab_parallel_cross_entropy': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'large': ('bfloat16', '1-4,6,8,12,16,24,32,48,64'),
            'tiny': ('float32', '1-4,6,8,12,16,24,48'),
        },
    },
    'vocab_parallel_log_prob_topk': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8,16'),
        },
    },
    'vocab_parallel_log_prob_topk_chunked': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8,16'),
        },
    },
    'vocab_parallel_log_prob_topk_chunked_backward': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16'),
            'large': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8,16'),
        },
    },
    'zero1_optimizer_shard': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
    'zero2_optimizer_shard_grad': {
        'dtypes': ('float32', 'bfloat16', 'float16'),
        'presets': {
            'bench': ('bfloat16', '1-2,4,8,16,32,64'),
            'tiny': ('float32', '1-2,4,8'),
        },
    },
}
